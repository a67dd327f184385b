"""A step that fails while the run executes fails its own host, and the other hosts go on.

Why: pyinfra 3.10 re-raises an exception from an operation's generator through the greenlet
of `_run_single_op`, before `state.fail_hosts` runs, so one guest's failed proof stopped the
run on every host (a Proxmox host half-converged, a monitoring host never reached, the next
replica of a fleet never switched). A command that returns False fails just its host: pyinfra's
own path. So each llmhost operation is wrapped: an error raised while executing (a proof that
fails, a rollback that reports what it did) becomes one FunctionCommand that prints it and
returns False. Ctrl-C (Interrupted) still ends the whole run; an error while preparing (bad
data, a missing file) still stops the run before anything changes, as before.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Generator
from typing import Any

from pyinfra import host as ctx_host
from pyinfra import logger
from pyinfra.api import FunctionCommand, OperationError
from pyinfra.context import state as ctx_state

from llmhost.interrupt import Interrupted
from llmhost.proofs.base import ProofFailed


def fail_this_host(state: Any, host: Any, names: str, message: str) -> bool:
    """A FunctionCommand callback (it takes `state` and `host`, so pyinfra reads its result):
    print the failure once, and return False so that pyinfra fails this host only."""
    host.log_styled(f"Operation error in {names}: {message}", fg="red", log_func=logger.error)
    return False


def failure_message(exc: BaseException) -> str:
    """What the operator reads: a proof's or pyinfra's own message as it is, anything else
    with its type (an unexpected error is worth naming)."""
    return str(exc) if isinstance(exc, OperationError | ProofFailed) else repr(exc)


def fails_its_host(body: Callable[..., Generator[Any, Any, Any]]) -> Callable[..., Any]:
    """Wrap an operation's body (under `@operation()`)."""

    @functools.wraps(body)
    def wrapped(*args: Any, **kwargs: Any) -> Generator[Any, Any, Any]:
        try:
            yield from body(*args, **kwargs)
        except Interrupted:
            raise
        except Exception as exc:
            if not ctx_state.is_executing:
                raise
            message = failure_message(exc)
            yield FunctionCommand(fail_this_host, (operation_names(), message), {})

    return wrapped


def operation_names() -> str:
    op_hash = ctx_host.executing_op_hash
    if op_hash is None:
        return "an operation"
    return ", ".join(sorted(ctx_state.get_op_meta(op_hash).names)) or "an operation"
