"""Post-deploy proofs as pyinfra operations: adapters over the plain-Python proofs in
`llmhost/proofs/`.

`correct` runs on every converge from the control machine and yields no command: a
converged host reports zero changes. `load_proofs` yields one `FunctionCommand` (the gate,
the draft A/B, the results: proofs/load.py) that runs only when the cadence says so (its
`_if`), so a converge that changed nothing neither load-tests the server nor reports a
change, while a run that does load-test says so in its counts and under --dry. A failed
proof fails its host (operations/failure.py, operations/step.py) with the numbers that
failed it and, during a switch, rolls it back first.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass
from typing import Any

from pyinfra import host
from pyinfra.api import operation
from pyinfra.context import state

from llmhost.bench import cadence as load_cadence
from llmhost.bench.cadence import LoadProofs
from llmhost.monitoring import gate_textfile_command
from llmhost.operations.failure import fails_its_host
from llmhost.operations.log import say
from llmhost.operations.rollback import rolls_back
from llmhost.operations.step import engine_step
from llmhost.proofs.correct import CorrectnessCheck
from llmhost.proofs.load import DraftAB, PassRecord, run_load_proofs, wanted
from llmhost.proofs.sweep import BenchRun

__all__ = ["BenchRun", "Cadence", "CorrectnessCheck", "DraftAB", "correct", "load_proofs"]


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


@operation()
@fails_its_host
def correct(check: CorrectnessCheck, guard: Any = None):
    """
    Greedy completions of the profile's prompts, judged before any number counts.

    + check: the server, model, prompts and reference of the probe (CorrectnessCheck)
    + guard: a switch in flight (SwitchGuard): a failure here rolls it back
    """
    if not state.is_executing:
        return
    with rolls_back(guard):
        lines = check.run()
    say(f"correctness OK for {check.model}: {lines}")
    host.noop(f"{check.model} answers correctly")
    yield from ()


@operation()
def load_proofs(
    run: BenchRun,
    gate: bool,
    cadence: Cadence,
    ab: DraftAB | None = None,
    guard: Any = None,
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
    """
    export = functools.partial(gate_textfile_command, run.model, max_age_s=cadence.max_age_s)
    record = PassRecord(cadence.record, export)
    verdicts = guard.verdicts if guard is not None else None

    def prove() -> None:
        armed = guard.armed if guard is not None else (lambda: False)
        run_load_proofs(run, gate, cadence.decide(), ab, record, verdicts, armed)

    prove.__name__ = f"load_proofs_of_{run.model}"
    yield engine_step(prove, guard)
