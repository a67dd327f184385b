"""The load proofs of one model, in one step: correctness under traffic, the gate's sweep,
the draft A/B against that same sweep, the results saved, then the verdict.

Why one step: the three hand one sweep on (the A/B compares against the gate's), and every
verdict is saved before any failure is raised; as one function the hand-over is a local
variable, not state shared between pyinfra operations.
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass

from llmhost.bench.cadence import LoadProofs, draft_ab_runs
from llmhost.proofs import draft_ab
from llmhost.proofs.base import ProofFailed, Verdict
from llmhost.proofs.gate import BenchOutcome, measure, save, verdict
from llmhost.proofs.sweep import BenchRun


@dataclass(frozen=True)
class DraftAB:
    """The A/B of a draft profile: its serving unit, the no-draft twin, how it is judged."""

    unit: str
    ab_unit: str
    mode: str  # verify.draft_ab: "on-change", "always" or "never"
    tolerance: float  # how much slower the draft may be, as noise allowance
    load_timeout_s: int  # how long a restarted unit may take to be ready


@dataclass(frozen=True)
class PassRecord:
    """Where the guest keeps the time of the last passing gate (the cadence reads it), and
    the command that tells node exporter's textfile (the GateStale alert), given that time."""

    path: str
    export: Callable[[int], str]  # monitoring.gate_textfile_command, bound to model and age


def wanted(load: LoadProofs, ab: DraftAB | None) -> bool:
    """Whether the step runs at all: the cadence says so, or an A/B set to "always" asks
    for it (it needs the gate's sweep to compare against)."""
    return load.run or (ab is not None and ab.mode == "always")


def run_load_proofs(
    run: BenchRun,
    gate: bool,
    load: LoadProofs,
    ab: DraftAB | None = None,
    record: PassRecord | None = None,
    verdicts: dict[str, str] | None = None,
    rolls_back: Callable[[], bool] = lambda: False,
) -> Verdict:
    """Measure, compare, save; the verdict, or ProofFailed carrying it on any failure.
    `verdicts` (a switch's) receives "passed" or "FAILED" before that. A pass is recorded on
    the guest. `rolls_back` says whether a failure now rolls a switch back (the A/B then skips
    a reload for nothing)."""
    outcome = BenchOutcome()
    measure(run, gate, outcome)
    if ab is not None and draft_ab_runs(ab.mode, load):
        draft_ab.compare(
            run, outcome, ab.unit, ab.ab_unit, ab.tolerance, ab.load_timeout_s, rolls_back
        )
    elif ab is not None:
        run.log(f"draft A/B for {run.model} skipped: verify.draft_ab = {ab.mode}")
    proven = verdict(run, outcome, save(run, outcome))
    if verdicts is not None:
        verdicts["gate"] = "passed" if proven.passed else "FAILED"
    if not proven.passed:
        raise ProofFailed("\n".join(proven.lines), proven)
    if record is not None:
        now = int(time.time())
        exported = record.export(now)
        ok, _, stderr = run.shell(
            f"printf '%s\\n' {now} > {shlex.quote(record.path)} && {exported}"
        )
        if not ok:
            raise ProofFailed(
                f"the gate passed but its record {record.path} was not written: {stderr}",
                proven,
            )
    return proven
