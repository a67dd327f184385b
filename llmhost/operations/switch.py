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

import functools
from pathlib import Path

from pyinfra import host
from pyinfra.api import operation

from llmhost.operations.log import say
from llmhost.operations.step import engine_step
from llmhost.switch.guard import (
    RollbackTarget,
    SwitchGuard,
    record_command,
    save_switch,
    summary_lines,
)

__all__ = ["RollbackTarget", "SwitchGuard", "switch_commit", "switch_start", "switch_stop"]


@operation()
def switch_stop(guard: SwitchGuard):
    """
    Stop and disable the old model's unit, verify the GPUs are free, record "pending".

    A change: it stops a unit. Its files and weights stay for the rollback. From here on a
    failure rolls back, this step's own included (GPU memory still held after the stop).

    + guard: the switch in flight (its plan names the old model)
    """
    plan = guard.plan
    if not plan.switching or plan.resumed or plan.source is None:
        host.noop("no model to stop")
        return
    yield engine_step(guard.stop_old, guard)


@operation()
def switch_start(guard: SwitchGuard, unit: str):
    """
    Enable and start the new model's unit, under the guard: a start that fails rolls back.

    + guard: the switch in flight
    + unit: the new model's unit
    """
    yield engine_step(functools.partial(guard.start_new, unit), guard)


@operation()
def switch_commit(guard: SwitchGuard, record_text: str | None):
    """
    The new model passed its proofs: record it (and what served before), print the summary
    and save it beside the host's benchmark results.

    + guard: the switch in flight (or a run that switched nothing)
    + record_text: the guest's record as read at the start of the run
    """
    plan = guard.plan
    if plan.switching:
        yield engine_step(functools.partial(commit, guard), guard)
    elif (record_text or "").strip() == plan.committed.dump():
        host.noop(f"{plan.target} is the recorded model")
    else:
        yield record_command(guard.record_path, plan.committed)


def commit(guard: SwitchGuard) -> None:
    guard.commit()
    summary = guard.summary()
    for line in summary_lines(summary):
        say(line)
    say(f"switch results: {save_switch(Path(guard.results_dir), summary)}")
