"""Readiness as a pyinfra operation: one engine step that waits until the unit serves.

Why a step with an `_if` (`ready_due`): the wait runs, and counts as a change, when there is
something to wait for: this run (re)started the unit, a switch is in flight, or the server
does not answer one look when the step would run. A converged host's server answers that
look, the line saying so is printed, and the run reports zero changes.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pyinfra import host
from pyinfra.api import OperationError, StringCommand, operation

from llmhost.endpoint import Endpoint
from llmhost.facts.files import JournalTail, UnitState
from llmhost.interrupt import interruptible
from llmhost.operations.log import say
from llmhost.operations.step import engine_step
from llmhost.proofs.readiness import Readiness, crash_reason, restart_count

if TYPE_CHECKING:
    from llmhost.switch.guard import SwitchGuard


def switching(guard: SwitchGuard | None) -> bool:
    """Whether a switch is in flight: the served model always has a guard (SwitchGuard), which
    only arms when its plan switches."""
    return guard is not None and bool(guard.plan.switching)


def touched(started_by: Any, guard: SwitchGuard | None) -> bool:
    """Whether this run (re)started the unit or switches to it: then its proofs run."""
    return switching(guard) or (started_by is not None and started_by.started())


def ready_due(
    endpoint: Endpoint, started_by: Any = None, guard: SwitchGuard | None = None
) -> Callable[[], bool]:
    """The readiness step's `_if`: False only for a server this run did not touch that
    answers one look now (it is then said to serve, with what it answered)."""

    def due() -> bool:
        if touched(started_by, guard):
            return True
        try:
            result = endpoint.probe(timeout=10, answer_within=30)
        except Exception:  # noqa: BLE001 - a look that breaks: wait (the step fails alone)
            return True
        if result.ready:
            say(
                f"READY {endpoint.served_name} at {endpoint.base_url}: serving, this run "
                f"restarted nothing (models: {', '.join(result.models)})"
            )
        return not result.ready

    return due


@operation()
def ready(
    unit: str,
    endpoint: Endpoint,
    timeout_s: int,
    started_by: Any = None,
    guard: SwitchGuard | None = None,
):
    """
    Wait until the unit serves: /health, /v1/models lists its served name, a 1-token completion.
    Call it with `_if=ready_due(...)`. On timeout the host fails with the unit's last journal
    lines.

    + unit: the systemd unit serving the model
    + endpoint: where it answers (Endpoint: URL, served name, the site's API key, which its
      repr leaves out)
    + timeout_s: the profile's load timeout
    + started_by: the operations that may have (re)started the unit in this run (UnitOps):
      a unit this run started that never gets ready is stopped and disabled, not left
      restarting forever (on a first deploy there is nothing to roll back to)
    + guard: a switch in flight (SwitchGuard): not ready rolls it back to the previous model
    """

    def wait() -> None:
        wait_until_ready(unit, endpoint, timeout_s, started_by, guard)

    wait.__name__ = f"readiness_of_{unit}"
    yield engine_step(wait, guard, shown=(f"GET {endpoint.base_url}/health",))


def wait_until_ready(
    unit: str, endpoint: Endpoint, timeout_s: int, started_by: Any, guard: SwitchGuard | None
) -> None:
    def state() -> dict[str, str]:
        return host.get_fact(UnitState, unit=unit)

    restarts_before = restart_count(state())

    def crash_check() -> str | None:
        return crash_reason(unit, state(), restarts_before)

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


def give_up(unit: str, result: Readiness, started_by: Any) -> None:
    """Fail with the journal; a unit this run started is stopped and disabled, not left
    crash-looping (a first deploy has no previous model to go back to)."""
    journal = host.get_fact(JournalTail, unit=unit, lines=40)
    stopped = ""
    if started_by is not None and started_by.started() and result.stage != "auth":
        host.run_shell_command(StringCommand(f"systemctl disable --now {shlex.quote(unit)}"))
        stopped = f"\n{unit} was started by this run and never got ready: stopped and disabled"
    raise OperationError(
        f"{unit} not ready after {result.waited_s:.0f}s at stage {result.stage!r}: "
        f"{result.detail}\n--- last journal lines of {unit} ---\n" + "\n".join(journal) + stopped
    )
