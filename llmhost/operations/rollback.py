"""The hook every proof runs under: during a switch, a failed proof rolls the switch back.

A step that fails ends its host's run in pyinfra, so no later operation could undo a
switch: the rollback runs inside the failing step. `engine_step` (step.py) runs every proof
and switch step under `rolls_back(guard)`, with the SwitchGuard of switch/guard.py or None
outside a switch; the guard's own state machine moves to ROLLING_BACK and does the work
(SwitchGuard.roll_back). A guard that is not armed (the old model still serves) lets the failure
through untouched.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from llmhost.interrupt import Interrupted

if TYPE_CHECKING:
    from llmhost.switch.guard import SwitchGuard


@contextmanager
def rolls_back(guard: SwitchGuard | None) -> Iterator[None]:
    """Run a proof; on failure, let the guard roll back (it raises) before the error ends it."""
    try:
        yield
    except Interrupted:
        raise  # Ctrl-C: no rollback (a second load); the guard says where the switch stands
    except Exception as exc:
        if guard is not None and guard.armed():
            guard.roll_back(exc)  # raises SwitchFailed naming the failure and the outcome
        raise
