"""Post-deploy proofs as pyinfra operations: adapters over the plain-Python proofs in
`llmhost/proofs/`.

Each yields one `FunctionCommand` (operations/step.py) that runs only when its `_if` says
so: `correct`, when the unit's current run has not passed the probe yet (after a start, in a
switch, or with verify.mode = full: `correct_due`); `load_proofs` (the gate, the draft A/B,
the results: proofs/load.py), when the cadence says so. A converge that changed nothing
neither probes nor load-tests the server and reports zero changes; a run that does says so
in its counts and under --dry. A failed proof fails its host with the numbers that failed
it and, during a switch, rolls it back first.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyinfra import host
from pyinfra.api import operation

from llmhost.bench import cadence as load_cadence
from llmhost.bench.cadence import LoadProofs
from llmhost.facts.files import MatchingFiles, PathStates
from llmhost.monitoring import (
    GATE_TEXTFILE_PATTERN,
    TEXTFILE_DIR,
    gate_pass_export,
    gate_text,
    gate_textfile,
    gate_textfile_command,
)
from llmhost.operations.log import say
from llmhost.operations.serving import touched
from llmhost.operations.step import engine_step
from llmhost.proofs.base import remove_command
from llmhost.proofs.correct import CorrectnessCheck, CorrectnessRecord
from llmhost.proofs.load import DraftAB, PassRecord, run_load_proofs, wanted
from llmhost.proofs.sweep import BenchRun

if TYPE_CHECKING:
    from llmhost.switch.guard import SwitchGuard

__all__ = [
    "BenchRun",
    "Cadence",
    "CorrectnessCheck",
    "CorrectnessRecord",
    "DraftAB",
    "correct",
    "correct_due",
    "gate_exports",
    "load_proofs",
]


@dataclass(frozen=True)
class Cadence:
    """What decides whether the load proofs run (bench/cadence.py), read when executing."""

    mode: str  # verify.mode
    max_age_s: int
    last_pass: float | None  # the guest's record of the last passing gate, read at prepare
    record: str  # where that record lives on the guest
    unit_ops: Any = None  # this run's restart/start operations of the unit (UnitOps)

    def decide(self) -> LoadProofs:
        started = self.unit_ops is not None and self.unit_ops.started()
        mode: Any = self.mode  # validated by GuestConfig: "auto", "full" or "basic"
        return load_cadence.load_proofs(mode, started, self.last_pass, self.max_age_s, time.time())

    def runs(self, model: str, ab: DraftAB | None) -> bool:
        """The load proofs' `_if`, asked when they would execute: the decision, printed."""
        load = self.decide()
        run = wanted(load, ab)
        why = load.why if load.run else f"skipped: {load.why}"
        if run and not load.run:
            why = f"{load.why}; run for the draft A/B (verify.draft_ab = always)"
        say(f"load proofs of {model}: {why}")
        return run


def correct_due(
    record: CorrectnessRecord, mode: str, started_by: Any = None, guard: SwitchGuard | None = None
) -> Callable[[], bool]:
    """The correctness step's `_if`: False only for a unit this run did not touch whose
    current run already passed this probe (verify.mode = full probes anyway)."""

    def due() -> bool:
        if mode == "full" or touched(started_by, guard):
            return True
        try:
            stamp = record.holds()
        except Exception:  # noqa: BLE001 - an unreadable record: probe (the step fails alone)
            return True
        if stamp is not None:
            say(
                f"correctness of {record.check.model}: proven for this run of {record.unit} "
                f"(invocation {stamp[:12]}); not probed again"
            )
        return stamp is None

    return due


@operation()
def correct(
    check: CorrectnessCheck,
    guard: SwitchGuard | None = None,
    record: CorrectnessRecord | None = None,
):
    """
    Greedy completions of the profile's prompts, judged before any number counts; a pass is
    recorded for the unit's current run. Call it with `_if=correct_due(...)`.

    + check: the server, model, prompts and reference of the probe (CorrectnessCheck)
    + guard: a switch in flight (SwitchGuard): a failure here rolls it back
    + record: where the guest keeps which run of the unit passed (None: not kept)
    """

    def prove() -> None:
        verdict = check.run()
        say(f"correctness OK for {check.model}: {verdict.text()}")
        if record is not None:
            record.write()

    prove.__name__ = f"correctness_of_{check.model}"
    yield engine_step(prove, guard)


@operation()
def load_proofs(
    run: BenchRun,
    gate: bool,
    cadence: Cadence,
    ab: DraftAB | None = None,
    guard: SwitchGuard | None = None,
    correctness: CorrectnessRecord | None = None,
):
    """
    The gate's sweep at the profile's lengths and concurrencies, judged on its baselines;
    for a draft profile the A/B against the same model without its draft; every verdict
    saved, then the host failed on any that failed, or the pass recorded on the guest.
    Call it with `_if=lambda: cadence.runs(model, ab)`.

    + run: the server, model, benchmark profile, labels and results directory
    + gate: fail below the floor; False prints the lines, gates nothing
    + cadence: whether to load-test now (a converge that changed nothing does not)
    + ab: the draft A/B's units and settings; None: the profile has no draft
    + guard: a switch in flight (SwitchGuard): any failure rolls it back
    + correctness: the unit's correctness record; the A/B restarts the unit, and a proven
      unit's proof carries over to the run it gives back (the same inputs) when all passed
    """
    export = gate_pass_export(run.model, cadence.max_age_s, gated=gate)
    record = PassRecord(cadence.record, export)
    verdicts = guard.verdicts if guard is not None else None

    def prove() -> None:
        armed = guard.armed if guard is not None else (lambda: False)
        carried = ab is not None and correctness is not None and correctness.holds() is not None
        run_load_proofs(run, gate, cadence.decide(), ab, record, verdicts, armed)
        if carried and correctness is not None:
            correctness.write()

    prove.__name__ = f"load_proofs_of_{run.model}"
    yield engine_step(prove, guard)


@operation()
def gate_exports(
    records: dict[str, tuple[int, int]], installed_now: bool = False, keep: tuple[str, ...] = ()
):
    """
    node exporter's textfile holds, for each gated model of this guest, the time of its last
    passing gate (0: none yet) and its verify.max_age_s, read from the guest's records; the
    files of models it no longer serves are removed. Without this, a model never gated would
    export nothing and its GateStale alert could never fire. Runs before the load proofs,
    whose pass then writes the same file with the new time (so the next run has nothing to do).

    + records: model -> (last pass in epoch seconds or 0, verify.max_age_s)
    + installed_now: this run installs node exporter here first (deploys/site.py); else
      a guest without its textfile directory (deploys/serve.py before any site run) is
      left alone, where a write would do nothing and so be due again on every run
    + keep: models whose file stays as it is: a switch's source, which serves again if the
      switch rolls back (the switch's commit removes it: SwitchGuard.source_leftovers)
    """
    wanted = {gate_textfile(m): (m, when, age) for m, (when, age) in records.items()}
    states = host.get_fact(PathStates, paths=(TEXTFILE_DIR, *wanted))
    if (states.get(TEXTFILE_DIR) or {}).get("type") != "d" and not installed_now:
        host.noop(f"no node exporter here ({TEXTFILE_DIR}): no gate records to export")
        return
    present = host.get_fact(MatchingFiles, directory=TEXTFILE_DIR, pattern=GATE_TEXTFILE_PATTERN)
    kept = {gate_textfile(model) for model in keep}
    stale = [path for path in present if path not in wanted and path not in kept]
    due = [
        (m, when, age)
        for path, (m, when, age) in wanted.items()
        if (states.get(path) or {}).get("sha256")
        != hashlib.sha256(gate_text(m, when, age).encode()).hexdigest()
    ]
    if not stale and not due:
        host.noop("node exporter's gate records are up to date")
        return
    if stale:
        yield remove_command(stale)
    for model, when, age in due:
        yield gate_textfile_command(model, when, age)
