"""The stages of one switch and the only order they may follow, for a fresh switch and for
one resumed after an interruption (which starts where the old unit is already stopped).

Why one table: what Ctrl-C prints, what a failure says and whether a failure rolls back all
follow from the stage; a stage set out of order is a bug, caught where it happens.
"""

from __future__ import annotations

from enum import Enum


class Stage(Enum):
    STAGING = "staging"  # the old model serves; the new venv and weights are being staged
    STOPPING = "stopping"  # the old unit is being stopped and the GPUs freed
    STOPPED = "stopped"  # nothing serves; a resumed switch starts here
    STARTING = "starting"  # the new unit is being enabled and started
    LOADING = "loading"  # the new unit loads; readiness waits for its first answer
    ANSWERS = "answers"  # the new model answers; its proofs run
    ROLLING_BACK = "rolling back"  # a step failed: the old model is being served again
    ROLLED_BACK = "rolled back"  # the old model serves again, the new one is disabled
    COMMITTED = "committed"  # the new model passed: recorded as the one serving


ROLL_BACK_FROM = {Stage.STOPPING, Stage.STOPPED, Stage.STARTING, Stage.LOADING, Stage.ANSWERS}

NEXT: dict[Stage, set[Stage]] = {
    Stage.STAGING: {Stage.STOPPING},
    Stage.STOPPING: {Stage.STOPPED, Stage.ROLLING_BACK},
    Stage.STOPPED: {Stage.STARTING, Stage.ROLLING_BACK},
    Stage.STARTING: {Stage.LOADING, Stage.ROLLING_BACK},
    # LOADING -> COMMITTED: the proofs passed though readiness never reported an answer
    # to the guard; the switch commits, its downtime "not measured".
    Stage.LOADING: {Stage.ANSWERS, Stage.COMMITTED, Stage.ROLLING_BACK},
    Stage.ANSWERS: {Stage.COMMITTED, Stage.ROLLING_BACK},
    Stage.ROLLING_BACK: {Stage.ROLLED_BACK},
    Stage.ROLLED_BACK: set(),
    Stage.COMMITTED: set(),
}


def first_stage(resumed: bool) -> Stage:
    """A fresh switch stages first; a resumed one finds the old unit already stopped."""
    return Stage.STOPPED if resumed else Stage.STAGING


def where(stage: Stage, old: str, new: str, source: str) -> str:
    """The guest's units at this stage, as an operator needs to hear it after Ctrl-C."""
    return {
        Stage.STAGING: f"{old} serves; {new} not started",
        Stage.STOPPING: f"{old} was being stopped (it may still be stopping); {new} not started",
        Stage.STOPPED: f"{old} is stopped and disabled; {new} is not started: NOTHING SERVES",
        Stage.STARTING: f"{old} is stopped and disabled; {new} was being started",
        Stage.LOADING: f"{old} is stopped and disabled; {new} is enabled and loading",
        Stage.ANSWERS: f"{old} is stopped and disabled; {new} serves, its proofs were running",
        Stage.ROLLING_BACK: f"the rollback to {source} was under way: {new} may be stopped, "
        f"{old} may be starting",
        Stage.ROLLED_BACK: f"{old} serves again; {new} is stopped and disabled",
        Stage.COMMITTED: f"{new} passed its proofs and serves; its record was being written",
    }[stage]
