"""The throughput gate: sweep, confirm a low reading once, judge against the host's own
baseline and the catalog, save every verdict, grow or set the host baseline.

The steps hand one `BenchOutcome` on (proofs/load.py runs them in order): `measure` fills it
(the sweep, the gate and spec-decode verdicts, the failures), the draft A/B
(proofs/draft_ab.py) compares against that same sweep, and `save` writes it all before
`verdict` fixes it as the proof's immutable `Verdict`. BenchOutcome is the working state
of one call and never leaves it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from llmhost.bench import gates
from llmhost.bench.baselines import (
    REBASELINE,
    HostBaseline,
    baseline_update,
    grown,
    load_host_baseline,
    record_baseline,
)
from llmhost.bench.gates import GateLine
from llmhost.bench.result import LevelResult
from llmhost.bench.spec_metrics import Acceptance, acceptance, fetch_spec_counters
from llmhost.catalog import BenchProfile
from llmhost.interrupt import interruptible
from llmhost.proofs.base import Verdict
from llmhost.proofs.deadlines import LIMITS
from llmhost.proofs.progress import pause
from llmhost.proofs.sweep import BenchRun, run_sweep


@dataclass
class BenchOutcome:
    """What the steps found, handed on: the sweep the A/B compares against, verdicts, failures."""

    results: list[LevelResult] = field(default_factory=list)
    verdicts: dict[str, object] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    # (why, tok/s, spread, samples) per concurrency to record as the host baseline
    new_baseline: tuple[str, dict[int, float], dict[int, float], dict[int, list[float]]] | None = (
        None
    )


def measure(run: BenchRun, gate: bool, outcome: BenchOutcome) -> None:
    """The sweep (again when gated and below a floor, `confirm`: the runs of all sweeps
    count), then the gate and spec-decode verdicts into `outcome`. Wrong answers under
    traffic, asked first, raise: no number counts then."""
    say = run.log
    if run.traffic_check is not None:
        # Its deadline is sized on this gate's figures, its progress printed as the run's.
        check = replace(run.traffic_check, bench=run.bench, log=run.log)
        say(f"correctness OK for {run.model} {check.run_under_traffic().text()}")
    bench = run.bench
    before = fetch_spec_counters(run.endpoint.base_url)
    say(
        f"benchmark {run.model}: {bench.input_len} in / {bench.output_len} out tokens, "
        f"c={run.levels}"
    )
    with interruptible(f"the benchmark of {run.model}"):
        outcome.results = run_sweep(run)
        if gate and bench.confirm:
            confirm(run, outcome)
    after = fetch_spec_counters(run.endpoint.base_url)
    judge_gate(run, gate, outcome)
    if before is not None and after is not None:
        record_acceptance(run, acceptance(before, after), outcome)


def confirm(run: BenchRun, outcome: BenchOutcome) -> None:
    """Below a floor: sweep again after a pause, up to `confirm_sweeps` times, until the
    median of every run of every sweep passes at each level (gates.pooled). A regression
    reads low in every run; load on a shared box for a minute or two is outvoted."""
    bench, sweeps = run.bench, [outcome.results]
    while len(sweeps) <= bench.confirm_sweeps:
        below = [line for line in gate_lines(run, outcome.results)[0] if not line.ok]
        if not below:
            break
        total = bench.confirm_sweeps + 1
        settled = [
            line
            for line in below
            if gates.failure_settled(line, bench.runs, total, bench.tolerance)
        ]
        if settled:
            run.log(
                f"throughput of {run.model} below its floor at c="
                + ",".join(str(line.concurrency) for line in settled)
                + f" in enough of the runs {total} sweeps would take that no further sweep "
                "can lift the median to its lowest possible floor: none is measured"
            )
            break
        run.log(
            f"throughput of {run.model} below its floor at c="
            + ",".join(str(line.concurrency) for line in below)
            + f": measuring once more to confirm ({len(sweeps)} of {bench.confirm_sweeps}), "
            f"in {bench.confirm_after_s} s; every run of every sweep counts (a regression "
            "reads low in all of them, a few minutes of load on the box in some)"
        )
        waiting(run, f"the confirming sweep {len(sweeps)} of {bench.confirm_sweeps}", bench)
        sweeps.append(run_sweep(run))
        outcome.results = gates.pooled(sweeps)
    if len(sweeps) > 1:
        outcome.verdicts["confirmation"] = {
            "first_sweep": {r.max_concurrency: r.output_throughput for r in sweeps[0]},
            "sweeps": [{r.max_concurrency: r.output_throughput for r in s} for s in sweeps],
            "confirming_sweeps": len(sweeps) - 1,
            "kept": "the median of every run of every sweep at each concurrency",
        }


def waiting(run: BenchRun, before: str, bench: BenchProfile) -> None:
    """The pause of `confirm_after_s` before `before`, with a line every 15 s (none silent)."""

    def say(slept: float, total: float) -> None:
        run.log(f"{run.model}: {before} in {total - slept:.0f} s (a pause of {total:.0f} s)")

    pause(bench.confirm_after_s, LIMITS.progress_every_s, say)


def gate_lines(
    run: BenchRun, results: list[LevelResult]
) -> tuple[list[GateLine], HostBaseline | None]:
    """The gate's lines for these results, and the host baseline they were judged on (a
    rebaseline run is judged on the catalog alone)."""
    own = load_host_baseline(Path(run.results_dir).absolute(), run.baseline_key())
    return gates.throughput_gate(results, run.bench, None if run.rebaseline else own), own


def judge_gate(run: BenchRun, gate: bool, outcome: BenchOutcome) -> None:
    """Print the gate lines; record them (or "off") and, when gated, a failure below a floor.

    The floor is the higher of the catalog's figure and this host's own baseline for the
    same profile, venv, driver and settings (bench/baselines.py): the first passing run
    sets it, verify.rebaseline replaces it (that run is judged on the catalog floor only).
    """
    say = run.log
    key = run.baseline_key()
    lines, own = gate_lines(run, outcome.results)
    if run.rebaseline and own:
        say(f"rebaseline {key.describe()}: the host baseline of {own.date} is replaced by this run")
    for line in lines:
        say(("throughput " if gate else "throughput (not gated) ") + line.text())
    outcome.verdicts["gate"] = [vars(line) | {"ok": line.ok} for line in lines] if gate else "off"
    if gate and not all(line.ok for line in lines):
        outcome.failures.append(
            f"throughput below baseline for {run.model}:\n  "
            + "\n  ".join(line.text() for line in lines if not line.ok)
        )
    if gate:  # an ungated run never sets a floor
        passed = all(line.catalog_ok for line in lines)
        reason = baseline_update(own, passed, run.rebaseline, run.bench.baseline_runs)
        outcome.new_baseline = None
        if reason:
            joins = None if reason == REBASELINE else own  # None: it starts one
            figures = grown(joins, gates.measured_tok_s(lines), gates.measured_spread(lines))
            outcome.new_baseline = (reason, *figures)
        unresolved = [line for line in lines if not line.resolvable]
        if unresolved:
            say(
                f"WARNING: the gate of {run.model} cannot resolve its margin here: this box's "
                "run-to-run scatter times z exceeds the catalog's tolerance at c="
                + ",".join(str(line.concurrency) for line in unresolved)
                + "; the floor sits at the tolerance, inside the noise (more runs, "
                "verify.bench.runs, or a quieter box)"
            )
        outcome.verdicts["baseline"] = {
            "key": key.id(),
            "host_baseline_of": own.set_at if own else None,
            "update": reason,
        }


def record_acceptance(run: BenchRun, acc: Acceptance, outcome: BenchOutcome) -> None:
    run.log(f"speculative decoding {run.model}: {acc.text()}")
    outcome.verdicts["spec_decode"] = {
        "acceptance_rate": acc.rate,
        "mean_accepted_length": acc.mean_accepted_length,
        "drafts": acc.drafts,
        "draft_tokens": acc.draft_tokens,
        "accepted_tokens": acc.accepted_tokens,
    }


def save(run: BenchRun, outcome: BenchOutcome) -> Path:
    """The sweep with every verdict under the results directory; a new or grown host
    baseline recorded only when nothing failed. Returns the run's JSON."""
    path = run.save("gate", outcome.results, outcome.verdicts)
    run.log(f"benchmark results: {shown(path)}")
    if outcome.new_baseline and not outcome.failures:
        reason, measured, spread, samples = outcome.new_baseline
        own = record_baseline(
            Path(run.results_dir).absolute(),
            run.baseline_key(),
            measured,
            reason,
            path.name,
            spread=spread,
            samples=samples,
        )
        run.log(f"host baseline of {own.key.describe()} set ({reason}): {own.baselines}")
    return path


def verdict(run: BenchRun, outcome: BenchOutcome, saved: Path) -> Verdict:
    """The load proofs' verdict: the failures' lines, or where the passing run was saved;
    every verdict of the run (gate, baseline, spec decode, A/B) as its figures."""
    lines = tuple(outcome.failures) or (f"passed, saved in {shown(saved)}",)
    figures = {**outcome.verdicts, "results_file": str(saved)}
    return Verdict("load proofs", run.model, not outcome.failures, lines, figures)


def shown(path: Path) -> Path:
    """A results path as printed: relative to the current directory when under it."""
    cwd = Path.cwd()
    return path.relative_to(cwd) if path.is_relative_to(cwd) else path
