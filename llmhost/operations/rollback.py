"""The hook every proof runs under: during a switch, a failed proof rolls the switch back.

A proof that fails ends the host's run in pyinfra, so no later operation could undo a
switch: the rollback has to run inside the failing proof. Proofs take a `guard` (a
SwitchGuard from switch/guard.py, or None outside a switch) and run their body under
`rolls_back(guard)`; a guard that is not armed (the old model still serves) lets the
failure through untouched.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from llmhost.interrupt import Interrupted


@contextmanager
def rolls_back(guard: Any) -> Iterator[None]:
    """Run a proof; on failure, let the guard roll back (it raises) before the error ends it."""
    try:
        yield
    except Interrupted:
        raise  # Ctrl-C: no rollback (a second load); the guard says where the switch stands
    except Exception as exc:
        if guard is not None and guard.armed():
            guard.roll_back(exc)  # raises SwitchFailed naming the failure and the outcome
        raise
