"""Make a zombie-GPU worker the way vLLM does: a spawned child holding GPU memory.

The parent prints the child's PID and sleeps; the caller SIGKILLs the parent, so the child is
orphaned (re-parented) and keeps its memory. With --vllm-name the child names itself like
vLLM's workers (comm "VLLM::Worker_TP0", truncated to 15 characters by the kernel).
"""

from __future__ import annotations

import argparse
import ctypes
import multiprocessing as mp
import sys
import time


def worker(gib: float, name: str | None) -> None:
    import torch

    if name:
        ctypes.CDLL("libc.so.6").prctl(15, name.encode(), 0, 0, 0)  # PR_SET_NAME
    block = torch.empty(int(gib * 1024**3), dtype=torch.uint8, device="cuda")
    block.fill_(1)
    torch.cuda.synchronize()
    print(f"worker ready holding {gib} GiB", flush=True)
    while True:
        time.sleep(1)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--gib", type=float, default=8)
    parser.add_argument("--vllm-name", action="store_true")
    args = parser.parse_args()
    ctx = mp.get_context("spawn")
    child = ctx.Process(
        target=worker, args=(args.gib, "VLLM::Worker_TP0" if args.vllm_name else None)
    )
    child.start()
    print(f"child {child.pid}", flush=True)
    while True:
        time.sleep(1)


if __name__ == "__main__":
    sys.exit(main())
