"""The GPU userspace check that must pass before a CUDA guest's vLLM unit may start."""

from __future__ import annotations

import time

from pyinfra import host
from pyinfra.api import OperationError, operation
from pyinfra.context import state

from llmhost.facts.nvidia import HostDriverVersion, UserspaceDriverVersion
from llmhost.gpu_userspace import driver_mismatch
from llmhost.operations.failure import fails_its_host
from llmhost.operations.log import say


@operation()
@fails_its_host
def driver_versions_match(pin: str):
    """
    Guest userspace driver == kernel module == pin, read fresh at execution time.

    + pin: group_data's cuda.driver_version (the host's driver)
    """
    if not state.is_executing:
        return
    nonce = str(time.monotonic())
    module = host.get_fact(HostDriverVersion, nonce=nonce)
    userspace = host.get_fact(UserspaceDriverVersion, nonce=nonce)
    problem = driver_mismatch(module, userspace or "absent", pin)
    if problem:
        raise OperationError(f"GPU userspace: {problem}; vLLM is not started")
    say(f"NVIDIA driver {module}: kernel module and userspace agree")
    host.noop("driver versions match")
    yield from ()
