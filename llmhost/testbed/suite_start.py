"""`make test` starts from one known state, even when something outside it is still stopping
containers as it begins.

Why: CI once ran on a machine where the sandbox guest was hard-stopped (no shutdown in its
journal) a few seconds after `sandbox up` had found it answering ssh; the next step's ssh got
"connection refused" and the whole suite ended after 19 s. The suite cannot tell who stops a
guest, but it can see that one is down and start it again. So each preparation step here runs
once more after the sandbox guest and the stand-in are brought back, and the suite starts only
once both have answered ssh for a few quiet seconds in a row.

The steps (each one said in `make test`'s Makefile comment):
- the fleet's copy removed (replica down), so the suite starts from one guest;
- the stand-in's Proxmox files reset;
- a failed switch the guest remembers forgotten.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from llmhost.testbed import sandbox

ATTEMPTS = 3
QUIET_S = 5.0  # both guests answer at the start and at the end of this many seconds


def answers(ip: str) -> bool:
    """One ssh `true`, 15 s at most."""
    key = sandbox.STATE_DIR / "id_ed25519"
    try:
        return (
            sandbox._run(
                [*sandbox.ssh_command(Path(key), ip), "-o", "ConnectTimeout=10", "true"],
                check=False,
                timeout=15,
            ).returncode
            == 0
        )
    except subprocess.TimeoutExpired:  # a guest stopped after the handshake: not answering
        return False


def bring_back() -> list[str]:
    """Start whichever guest is not answering; what was brought back, in words."""
    from llmhost.testbed import standin

    brought: list[str] = []
    if not sandbox.container_running() or not answers(sandbox.GUEST_IP):
        sandbox.log(f"{sandbox.CONTAINER} does not answer: starting it again")
        sandbox.up()
        brought.append(sandbox.CONTAINER)
    if not sandbox.container_running(standin.NAME) or not answers(standin.IP):
        sandbox.log(f"{standin.NAME} does not answer: starting it again")
        standin.up()
        brought.append(standin.NAME)
    return brought


def step(what: str, action: Callable[[], None]) -> None:
    """The step, and once more after the guests are back when it fails."""
    for attempt in range(1, ATTEMPTS + 1):
        try:
            action()
            return
        # A guest stopped mid-command: ssh refused (SandboxError) or hanging to its timeout.
        except (sandbox.SandboxError, subprocess.TimeoutExpired) as exc:
            if attempt == ATTEMPTS:
                raise sandbox.SandboxError(f"{what}: {exc} (tried {ATTEMPTS} times)") from exc
            sandbox.log(f"{what} failed ({exc}); bringing the guests back, then again")
            bring_back()


def quiet() -> None:
    """Both guests answer now and QUIET_S later; else they are brought back and watched again."""
    from llmhost.testbed import standin

    for _ in range(ATTEMPTS):
        ips = (sandbox.GUEST_IP, standin.IP)
        if all(answers(ip) for ip in ips):
            time.sleep(QUIET_S)
            if all(answers(ip) for ip in ips):
                return
        brought = bring_back()
        sandbox.log(f"brought back {', '.join(brought) or 'nothing'}; watching again")
    raise sandbox.SandboxError(
        f"the sandbox guests keep stopping: {sandbox.CONTAINER} and the stand-in did not stay up"
    )


def forget_failed() -> None:
    if not sandbox.container_running():
        raise sandbox.SandboxError(f"{sandbox.CONTAINER} is not running")
    sandbox.forget_failed_switch()


def prepare() -> None:
    from llmhost.testbed import replica, standin

    step("removing the fleet's copy", replica.down)
    step("resetting the stand-in", standin.reset)
    step("forgetting a failed switch", forget_failed)
    quiet()
    sandbox.log("make test starts from one guest, a reset stand-in and no failed switch")
