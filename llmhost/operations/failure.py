"""How an engine step's failure fails its own host, and the other hosts go on.

Why: pyinfra 3.10 re-raises an exception from an operation's generator through the greenlet
of `_run_single_op`, before `state.fail_hosts` runs, so one guest's failed proof stopped the
run on every host (a Proxmox host half-converged, a monitoring host never reached, the next
replica of a fleet never switched). A command that returns False fails just its host:
pyinfra's own path. So work that can fail while the run executes (a proof, a switch step, a
check after a reboot, a refusal of a host the deploy cannot converge) is one FunctionCommand
(operations/step.py) whose callback prints the failure once and returns False; operation
generators only read facts and yield commands, and raise nothing.
"""

from __future__ import annotations

from typing import Any

from pyinfra import host as ctx_host
from pyinfra import logger
from pyinfra.api import OperationError
from pyinfra.context import state as ctx_state

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


def operation_names() -> str:
    op_hash = ctx_host.executing_op_hash
    if op_hash is None:
        return "an operation"
    return ", ".join(sorted(ctx_state.get_op_meta(op_hash).names)) or "an operation"
