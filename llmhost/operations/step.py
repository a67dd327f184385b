"""An engine step as pyinfra's own kind of command: one `FunctionCommand` that runs a
plain-Python step (llmhost/proofs, llmhost/switch) when the operation executes.

Why: an operation's generator then holds no work. pyinfra runs the step in its place in the
run, counts it as a change only when it runs (an `_if` that says no leaves no command), shows
it under --dry, and fails just this host when the step returns False. A step's failure
(ProofFailed, or a switch's rollback report) is printed once under the host's prefix, as
`failure.fail_this_host` does; Ctrl-C ends the step quietly (interrupt.py exits the run).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pyinfra.api import FunctionCommand, OperationError

from llmhost.interrupt import Interrupted
from llmhost.operations.failure import fail_this_host, failure_message, operation_names
from llmhost.operations.rollback import rolls_back

if TYPE_CHECKING:
    from llmhost.switch.guard import SwitchGuard


def engine_step(
    step: Callable[[], object], guard: SwitchGuard | None = None, shown: tuple[str, ...] = ()
) -> FunctionCommand:
    """`step()` at execution time, under a switch's rollback guard when one is given.
    `shown`: what the command's repr prints (--dry, -v), e.g. the shell command it runs."""

    def run(state: Any, host: Any, *_shown: str) -> bool:
        try:
            with rolls_back(guard):
                step()
        except Interrupted:
            return False  # the run is exiting (exit 130); a traceback would only bury that
        except Exception as exc:  # noqa: BLE001 - any failure fails this host, not the run
            return fail_this_host(state, host, operation_names(), failure_message(exc))
        return True

    run.__name__ = step_name(step)
    return FunctionCommand(run, shown, {})


def step_name(step: Callable[[], object]) -> str:
    """The name `-v` shows for a step: a partial's function (start_new, commit), a plain
    function's own name; a lambda should not be passed (its name says nothing)."""
    inner = getattr(step, "func", step)  # functools.partial
    return getattr(inner, "__name__", "engine_step")


def refusal(message: str) -> FunctionCommand:
    """A step that fails this host with `message` when it runs: what an operation yields for
    a host it cannot converge (a guest that is not there, a file of the wrong kind), so that
    this host alone fails and the run's other hosts go on."""

    def refuse() -> None:
        raise OperationError(message)

    return engine_step(refuse, shown=(f"refuse: {message}",))
