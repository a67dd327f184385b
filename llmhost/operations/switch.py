"""Switching the served model, as pyinfra operations over the switch engine (llmhost/switch).

The order of a switch (tasks/serving_guest.py): stage the new venv and weights while the old
model serves; `switch_stop` (the last answer of the old model, stop and disable it, GPUs
free, the record says "pending"); `switch_start`; readiness, correctness, gate, A/B, each
under `rolls_back(guard)`; `switch_commit` (record, summary, downtime JSON).

Any failure after the old unit stopped rolls back inside the failing step: the new unit is
stopped and disabled, the GPUs freed, the previous unit enabled and started, its readiness
and correctness proven, and the host fails naming what failed and that the previous model
serves again. Ctrl-C does not roll back (that is a second load): it prints where the
switch stands (switch/stages.py), and the next run finishes it or rolls it back.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from pyinfra import host
from pyinfra.api import operation
from pyinfra.context import state

from llmhost.operations.failure import fails_its_host
from llmhost.operations.log import guest_run, say
from llmhost.operations.rollback import rolls_back
from llmhost.proofs.base import ProofFailed
from llmhost.switch.guard import (
    RollbackTarget,
    SwitchGuard,
    record_command,
    save_switch,
    stop_command,
    summary_lines,
)
from llmhost.switch.plan import unit_of
from llmhost.switch.stages import Stage

__all__ = ["RollbackTarget", "SwitchGuard", "switch_commit", "switch_start", "switch_stop"]


def tail(stdout: str, stderr: str) -> str:
    return " ".join((stderr.strip() or stdout.strip()).splitlines()[-5:])


@operation()
@fails_its_host
def switch_stop(guard: SwitchGuard):
    """
    Stop and disable the old model's unit, verify the GPUs are free, record "pending".

    A change: it stops a unit. Its files and weights stay for the rollback. From here on a
    failure rolls back, this step's own included (GPU memory still held after the stop).

    + guard: the switch in flight (its plan names the old model)
    """
    plan = guard.plan
    source = plan.source
    if not plan.switching or plan.resumed or source is None:
        host.noop("no model to stop")
        return
    if not state.is_executing:
        yield stop_command(guard)  # what --dry shows; run below, under the guard, when executing
        return
    with rolls_back(guard):
        ok, stdout, stderr = guest_run(guard.stopping())
        if not ok:
            raise ProofFailed(
                f"stopping {unit_of(source)} or freeing the GPUs failed: {tail(stdout, stderr)}"
            )
    guard.enter(Stage.STOPPED)
    # A change was made (a unit stopped); this read only makes pyinfra count it as one.
    yield f"systemctl show -p ActiveState --value {shlex.quote(unit_of(source))}"


@operation()
@fails_its_host
def switch_start(guard: SwitchGuard, unit: str):
    """
    Enable and start the new model's unit, under the guard: a start that fails rolls back.

    + guard: the switch in flight
    + unit: the new model's unit
    """
    command = f"systemctl enable --now {shlex.quote(unit)}"
    if not state.is_executing:
        yield command
        return
    with rolls_back(guard):
        guard.enter(Stage.STARTING)
        ok, stdout, stderr = guest_run(command)
        if not ok:
            raise ProofFailed(f"{unit} did not start: {tail(stdout, stderr)}")
    guard.enter(Stage.LOADING)
    yield f"systemctl is-enabled --quiet {shlex.quote(unit)}"


@operation()
@fails_its_host
def switch_commit(guard: SwitchGuard, record_text: str | None):
    """
    The new model passed its proofs: record it (and what served before), print the summary.

    + guard: the switch in flight (or a run that switched nothing)
    + record_text: the guest's record as read at the start of the run
    """
    plan = guard.plan
    if state.is_executing and plan.switching:
        guard.enter(Stage.COMMITTED)
        summary = guard.summary()
        for line in summary_lines(summary):
            say(line)
        path = save_switch(Path(guard.results_dir), summary)
        say(f"switch results: {path}")
    if (record_text or "").strip() == plan.committed.dump():
        host.noop(f"{plan.target} is the recorded model")
        return
    yield record_command(guard.record_path, plan.committed)
