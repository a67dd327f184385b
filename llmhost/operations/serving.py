"""Verification operations: they change nothing, and fail the deploy when the host is wrong."""

from __future__ import annotations

import shlex
import time
from typing import Any

from pyinfra import host
from pyinfra.api import OperationError, StringCommand, operation
from pyinfra.context import state

from llmhost.endpoint import Endpoint
from llmhost.facts.files import JournalTail, UnitState
from llmhost.interrupt import interruptible
from llmhost.operations.failure import fails_its_host
from llmhost.operations.log import say
from llmhost.operations.rollback import rolls_back
from llmhost.readiness import Readiness


@operation()
@fails_its_host
def ready(
    unit: str,
    endpoint: Endpoint,
    timeout_s: int,
    started_by: Any = None,
    guard: Any = None,
):
    """
    Wait until the unit serves: /health, /v1/models lists its served name, a 1-token completion.

    Runs at execution time from the control machine and yields no command, so a converged
    host still reports zero changes. On timeout it fails with the unit's last journal lines.

    + unit: the systemd unit serving the model
    + endpoint: where it answers (Endpoint: URL, served name, the site's API key, which its
      repr leaves out)
    + timeout_s: the profile's load timeout
    + started_by: the operations that may have (re)started the unit in this run (UnitOps):
      a unit this run started that never gets ready is stopped and disabled, not left
      restarting forever (on a first deploy there is nothing to roll back to)
    + guard: a switch in flight (SwitchGuard): not ready rolls it back to the previous model
    """
    if not state.is_executing:
        return  # prepare phase: nothing to decide yet, the unit may not even exist

    def restarts() -> int:
        show = host.get_fact(UnitState, unit=unit, nonce=str(time.monotonic()))
        return int(show.get("NRestarts", "0") or 0)

    restarts_before = restarts()

    def crash_check() -> str | None:
        # Restart=always hides a crash loop behind "activating": give up after two restarts.
        n = restarts() - restarts_before
        return f"{unit} crashed and was restarted {n} times while loading" if n >= 2 else None

    with rolls_back(guard):
        with interruptible(f"readiness of {unit}"):
            result = endpoint.wait_ready(
                timeout_s,
                log=say,
                interval_s=0.5 if guard is not None else 2.0,  # a switch measures downtime
                crash_check=crash_check,
            )
        if not result.ready:
            give_up(unit, result, started_by)
    if guard is not None:
        guard.answered()  # the new model's first answer: the switch's downtime ends here
    say(
        f"READY {endpoint.served_name} at {endpoint.base_url} after {result.waited_s:.0f}s "
        f"(models: {', '.join(result.models)}; 1-token completion: {result.completion!r})"
    )
    host.noop(f"{unit} serves {endpoint.served_name} at {endpoint.base_url}")
    yield from ()  # a verification: never a command, never a change


def give_up(unit: str, result: Readiness, started_by: Any) -> None:
    """Fail with the journal; a unit this run started is stopped and disabled, not left
    crash-looping (a first deploy has no previous model to go back to)."""
    journal = host.get_fact(JournalTail, unit=unit, lines=40, nonce=str(time.time()))
    stopped = ""
    if started_by is not None and started_by.started() and result.stage != "auth":
        host.run_shell_command(StringCommand(f"systemctl disable --now {shlex.quote(unit)}"))
        stopped = f"\n{unit} was started by this run and never got ready: stopped and disabled"
    raise OperationError(
        f"{unit} not ready after {result.waited_s:.0f}s at stage {result.stage!r}: "
        f"{result.detail}\n--- last journal lines of {unit} ---\n" + "\n".join(journal) + stopped
    )
