"""Post-deploy proofs as pyinfra operations: adapters over the plain-Python proofs in
`llmhost/proofs/` (correctness, the sweep and gate, the draft A/B).

Like `ready`, these run at execution time from the control machine and yield no command:
a converged host reports zero changes, and a failed proof fails its host (operations/
failure.py) with the numbers that failed it. Each binds the proof to its host (`guest_run`,
`say`), asks the cadence whether the load proofs run now, and, during a switch, runs under
its rollback guard. The draft A/B restarts units and so yields one command: it is a change.

The benchmark is three operations on one `BenchRun`, handing a `BenchOutcome` on:
`throughput_gate` (the sweep, the gate and spec-decode verdicts), `draft_ab` (the no-draft
sweep against that same sweep) and `bench_results` (save, then fail on any failed verdict).
"""

from __future__ import annotations

import shlex
import time
from dataclasses import dataclass
from typing import Any

from pyinfra import host
from pyinfra.api import operation
from pyinfra.api.operation import OperationMeta
from pyinfra.context import state

from llmhost.bench.cadence import LoadProofs, draft_ab_runs, load_proofs
from llmhost.monitoring import gate_textfile_command
from llmhost.operations.failure import fails_its_host
from llmhost.operations.log import say
from llmhost.operations.rollback import rolls_back
from llmhost.proofs import draft_ab as ab
from llmhost.proofs import gate as gates
from llmhost.proofs.correct import CorrectnessCheck
from llmhost.proofs.gate import BenchOutcome
from llmhost.proofs.sweep import BenchRun

__all__ = ["BenchOutcome", "BenchRun", "Cadence", "CorrectnessCheck"]


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
        now = time.time()
        return load_proofs(self.mode, started, self.last_pass, self.max_age_s, now)  # type: ignore[arg-type]


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
@fails_its_host
def throughput_gate(
    run: BenchRun,
    gate: bool,
    outcome: BenchOutcome,
    cadence: Cadence | None = None,
    guard: Any = None,
):
    """
    Benchmark at the profile's lengths and concurrencies; gate on its baselines.

    The verdict is recorded in outcome, not raised: the draft A/B still runs on a failed
    gate, and `bench_results` saves every verdict before it fails the deploy.
    Wrong answers under traffic (asked before the sweep) do raise: no number counts then.

    + run: the server, model, benchmark profile, labels and results directory
    + gate: fail below baseline x (1 - tolerance); False prints the lines, gates nothing
    + outcome: receives the sweep, the gate and spec-decode verdicts, the failures
    + cadence: whether to load-test now (a converge that changed nothing does not)
    + guard: a switch in flight (SwitchGuard): a failed benchmark rolls it back
    """
    if not state.is_executing:
        return
    with rolls_back(guard):
        if cadence is not None:
            outcome.load = cadence.decide()
            if not outcome.load.run:
                say(f"throughput gate of {run.model} skipped: {outcome.load.why}")
                host.noop(f"no load test of {run.model}: {outcome.load.why}")
                return
            say(f"throughput gate of {run.model}: {outcome.load.why}")
        gates.measure(run, gate, outcome)
    yield from ()


def ab_wanted(mode: str, unit_restarted: OperationMeta | None) -> bool:
    """Whether the A/B runs: mode "always", or "on-change" when this deploy restarted the unit."""
    changed = unit_restarted is not None and unit_restarted.did_change()
    return not (mode == "never" or (mode == "on-change" and not changed))


@operation()
@fails_its_host
def draft_ab(
    run: BenchRun,
    outcome: BenchOutcome,
    unit: str,
    ab_unit: str,
    mode: str,
    tolerance: float,
    load_timeout_s: int,
    unit_restarted: OperationMeta | None = None,
    guard: Any = None,
):
    """
    Serve the same model without its draft, run the same sweep, compare with outcome's sweep.

    + run: the server, model, benchmark profile, labels and results directory
    + outcome: holds the with-draft sweep of `throughput_gate`; receives the A/B verdict
    + unit: the serving unit
    + ab_unit: the same model without draft
    + mode: "on-change", "always" or "never"
    + tolerance: how much slower the draft may be, as noise allowance
    + load_timeout_s: how long a restarted unit may take to be ready
    + unit_restarted: the deploy's restart operation ("on-change" asks it)
    + guard: a switch in flight (SwitchGuard): a failed A/B rolls it back
    """
    if not state.is_executing:
        return
    with rolls_back(guard):
        load = outcome.load
        if not (draft_ab_runs(mode, load) if load is not None else ab_wanted(mode, unit_restarted)):
            say(
                f"draft A/B for {run.model} skipped: "
                + (load.why if load is not None else "the unit did not change in this run")
                + " (verify.draft_ab = 'always' runs it every time)"
            )
            return
        ab.compare(run, outcome, unit, ab_unit, tolerance, load_timeout_s)
    # The A/B stopped and started units: it is a change, and the serving unit must be back.
    yield f"systemctl is-active --quiet {shlex.quote(unit)}"


@operation()
@fails_its_host
def bench_results(
    run: BenchRun,
    outcome: BenchOutcome,
    record: str | None = None,
    guard: Any = None,
    max_age_s: int = 0,
):
    """
    Save the sweep with every verdict, then fail the deploy on what failed; on a pass, record
    its time on the guest (the cadence reads it: no load test again until max_age), and
    export it to node exporter where one runs (the GateStale alert).

    + run: the server, model, benchmark profile, labels and results directory
    + outcome: what `throughput_gate` (and `draft_ab`) found
    + record: where the guest keeps the time of the last passing gate
    + guard: a switch in flight (SwitchGuard): a failed verdict rolls it back
    + max_age_s: verify.max_age_s, exported beside the time
    """
    if not state.is_executing:
        return
    if outcome.load is not None and not outcome.load.run:
        host.noop(f"no benchmark of {run.model} in this run")
        return
    with rolls_back(guard):
        gates.save(run, outcome)
        if guard is not None:
            guard.verdicts["gate"] = "FAILED" if outcome.failures else "passed"
        gates.raise_failures(outcome)
    if record is None:
        host.noop(f"{run.model} holds its baseline")
        return
    now = int(time.time())
    exported = gate_textfile_command(run.model, now, max_age_s)
    yield f"printf '%s\\n' {now} > {shlex.quote(record)} && {exported}"
