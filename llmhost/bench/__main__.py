"""python -m llmhost.bench: the benchmark by hand, against any OpenAI-compatible server.

    python -m llmhost.bench --url http://10.99.0.12:8000 --catalog testbed --profile tiny-llama -c 1
    python -m llmhost.bench --url ... --model NAME --input-len 1024 --output-len 512 -c 1

Prints one line per concurrency and, with --json, writes the results in
`vllm bench serve` field names.

The server's API key comes from the environment variable LLMHOST_API_KEY (never an
argument: argv shows in `ps`); it is sent as `Authorization: Bearer` and written nowhere.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from llmhost.bench.sweep import sweep
from llmhost.catalog import BenchProfile, CatalogError, load_catalog
from llmhost.proofs.readiness import api_key_from_env, auth_headers


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m llmhost.bench", description=__doc__)
    parser.add_argument("--url", required=True, help="http://host:port of the server")
    parser.add_argument("--profile", help="catalog model: its served name, lengths, baselines")
    parser.add_argument(
        "--catalog",
        action="append",
        default=[],
        help="an extra catalog for --profile: 'testbed' (the sandbox's models) or a TOML file; "
        "repeatable (default: the production catalog only)",
    )
    parser.add_argument("--model", help="served model name (default: the profile's)")
    parser.add_argument("--input-len", type=int)
    parser.add_argument("--output-len", type=int)
    parser.add_argument("--num-prompts", type=int, help="per concurrency level")
    parser.add_argument("--warmup", type=int)
    parser.add_argument("--seed", type=int)
    parser.add_argument("-c", "--concurrency", type=int, action="append")
    parser.add_argument("--bench-json", help="a whole bench profile as JSON (used by the hook)")
    parser.add_argument("--label", action="append", default=[], help="KEY=VALUE metadata")
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)

    try:
        catalog = load_catalog(tuple(args.catalog))
    except CatalogError as exc:
        parser.error(f"--catalog: {exc}")
    profile = catalog.get(args.profile) if args.profile else None
    if args.profile and profile is None:
        known = ", ".join(sorted(catalog))
        parser.error(f"--profile: unknown model {args.profile!r}; known: {known} (--catalog adds)")
    if args.bench_json:
        bench = BenchProfile.model_validate_json(args.bench_json)
    else:
        base = profile.bench if profile and profile.bench else None
        fields: dict = base.model_dump() if base else {"tolerance": 0.0, "baselines": {1: 1.0}}
        for key, value in (
            ("input_len", args.input_len),
            ("output_len", args.output_len),
            ("warmup_requests", args.warmup),
            ("seed", args.seed),
        ):
            if value is not None:
                fields[key] = value
        if args.num_prompts is not None:
            fields.update(prompts_per_concurrency=1, min_prompts=args.num_prompts)
        if "input_len" not in fields or "output_len" not in fields:
            parser.error("give --profile with a bench section, or --input-len and --output-len")
        bench = BenchProfile(**fields)
    model = args.model or (profile.served_name if profile else None)
    if not model:
        parser.error("give --model or --profile")
    levels = args.concurrency or sorted(bench.baselines)
    labels = {"model_profile": args.profile or ""}
    for item in args.label:
        key, _, value = item.partition("=")
        if key not in ("model_profile", "host_profile", "host"):
            parser.error(f"--label: unknown key {key!r}")
        labels[key] = value
    headers = auth_headers(api_key_from_env())
    results = sweep(
        args.url, str(model), bench, levels, labels, not args.no_progress, headers=headers
    )
    for r in results:
        print(
            f"c={r.max_concurrency:<4} {r.output_throughput:9.1f} output tok/s  "
            f"{r.request_throughput:7.2f} req/s  TTFT p50 {r.median_ttft_ms:7.1f} ms  "
            f"TPOT p50 {r.median_tpot_ms:6.2f} ms  completed {r.completed}/"
            f"{r.completed + r.failed}"
        )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps([r.to_json() for r in results], indent=2) + "\n")
    return 0 if all(r.failed == 0 for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
