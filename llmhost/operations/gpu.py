"""The GPU userspace check that must pass before a CUDA guest's vLLM unit may start."""

from __future__ import annotations

import functools

from pyinfra import host
from pyinfra.api import OperationError, operation

from llmhost.facts.nvidia import HostDriverVersion, UserspaceDriverVersion
from llmhost.gpu_userspace import driver_mismatch
from llmhost.operations.log import say
from llmhost.operations.step import engine_step


def drivers_agree(pin: str) -> None:
    """Kernel module, guest userspace and pin read now, after this run's installs."""
    module = host.get_fact(HostDriverVersion)
    problem = driver_mismatch(module, host.get_fact(UserspaceDriverVersion) or "absent", pin)
    if problem:
        raise OperationError(f"GPU userspace: {problem}; vLLM is not started")
    say(f"NVIDIA driver {module}: kernel module and userspace agree")


@operation()
def driver_versions_match(pin: str):
    """
    Guest userspace driver == kernel module == pin, read when it runs. Call it with `_if=`
    "the versions differed while planning, or this run installed something": a guest
    that agreed and got nothing new has nothing to check again.

    + pin: group_data's cuda.driver_version (the host's driver)
    """
    yield engine_step(functools.partial(drivers_agree, pin), shown=("read the driver versions",))
