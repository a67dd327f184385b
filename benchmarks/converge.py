"""No-op converge time of deploys/serve.py on the converged sandbox guest.

Printed as a ratio to `pyinfra <guest> exec -- true` (connect + one command) measured in
the same run, so the figure says what the deploy's fact gathering and checks cost over
pyinfra's own floor, independent of how fast this machine is today.
"""

from __future__ import annotations

import platform
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from llmhost.bench.history import save_benchmark  # noqa: E402
from llmhost.testbed.sandbox import load_state  # noqa: E402

PYINFRA = str(Path(sys.executable).with_name("pyinfra"))
RUNS = 3


def timed(args: list[str]) -> float:
    start = time.perf_counter()
    proc = subprocess.run([PYINFRA, "-y", *args], cwd=REPO, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"pyinfra {' '.join(args)} failed:\n{proc.stdout[-3000:]}{proc.stderr}")
    return elapsed


def git_sha() -> str:
    out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True)
    return out.stdout.strip() or "unknown"


def main() -> int:
    state = load_state()
    floor_args = [
        state.ip,
        "--ssh-user",
        "root",
        "--ssh-key",
        state.ssh_key,
        "--data",
        "ssh_strict_host_key_checking=no",
        "--data",
        "ssh_known_hosts_file=/dev/null",
        "exec",
        "--",
        "true",
    ]
    # The default proofs: a converge that changed nothing looks once for readiness and finds
    # correctness recorded for the unit's current run; the throughput gate is skipped while
    # its last pass is recent (the warm-up records one, and the correctness record).
    serve_args = [
        "inventory/sandbox.py",
        "deploys/serve.py",
        "--limit",
        "sandbox",  # the guest alone, as the floor: the site's stand-in is not connected
    ]
    # Every proof that can be off: no gate, no A/B, no correctness (readiness stays).
    off_args = [*serve_args, "--data", 'verify={"mode": "basic", "correctness": false}']
    timed(serve_args)  # warm-up: converge first, so the measured runs are no-ops
    floor, serve, off = [], [], []
    for _ in range(RUNS):  # interleaved: drift of the shared cores hits all three alike
        floor.append(timed(floor_args))
        serve.append(timed(serve_args))
        off.append(timed(off_args))
    ratio = statistics.median(serve) / statistics.median(floor)
    ratio_off = statistics.median(off) / statistics.median(floor)
    result = {
        "benchmark": "converge",
        "time": datetime.now(UTC).isoformat(timespec="seconds"),
        "git_sha": git_sha(),
        "machine": platform.node(),
        "runs": RUNS,
        "serve_noop_s": serve,
        "exec_true_s": floor,
        "serve_noop_median_s": statistics.median(serve),
        "exec_true_median_s": statistics.median(floor),
        "ratio": round(ratio, 2),
        "proofs_off_s": off,
        "proofs_off_median_s": statistics.median(off),
        "ratio_proofs_off": round(ratio_off, 2),
        "goals": {"ratio": 3.0, "ratio_proofs_off": 2.5},
    }
    save_benchmark("converge", result, REPO / "results" / "benchmarks")
    print(
        f"converge: serve.py no-op {result['serve_noop_median_s']:.2f}s vs exec -- true "
        f"{result['exec_true_median_s']:.2f}s = {ratio:.2f}x (goal <= 3.0); every proof off "
        f"{result['proofs_off_median_s']:.2f}s = {ratio_off:.2f}x (goal <= 2.5); median of {RUNS}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
