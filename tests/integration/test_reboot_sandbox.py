"""After a reboot the guest serves by itself, and a rerun of the deploy changes nothing.

lxc-stop/lxc-start stops and boots the guest's systemd, as a host reboot does. The `served`
fixture first makes sure tiny-llama is served; the `rebooted` fixture converges it with this
checkout's deploy, then reboots the guest once for the module.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from llmhost.config.guest import GuestConfig
from llmhost.naming import unit_name
from llmhost.proofs.readiness import Readiness, wait_ready
from llmhost.testbed import sandbox as sandbox_ctl
from llmhost.testbed.sandbox import SandboxState
from tests.helpers import SERVE, api_headers, changed_ops, guest_sh, pyinfra


@dataclass(frozen=True)
class Reboot:
    unit: str
    started_before: str  # the unit's ExecMainStartTimestamp before the reboot
    readiness: Readiness  # waited for from the control machine after it


def unit_started(sandbox: SandboxState, unit: str) -> str:
    return guest_sh(sandbox, f"systemctl show -p ExecMainStartTimestamp --value {unit}")


@pytest.fixture(scope="module")
def rebooted(sandbox: SandboxState, served: GuestConfig) -> Reboot:
    unit = unit_name(served.served_model)
    converge = pyinfra(*SERVE)  # converged by this checkout's code, not only "serving"
    assert converge.rc == 0, converge.tail()
    started_before = unit_started(sandbox, unit)
    sandbox_ctl.reboot()
    sandbox_ctl.wait_ssh(sandbox_ctl.STATE_DIR / "id_ed25519")
    served_name = str(served.profile.served_name)
    readiness = wait_ready(
        f"http://{sandbox.ip}:{served.port}", served_name, 420, log=print, headers=api_headers()
    )
    return Reboot(unit, started_before, readiness)


def test_the_guest_serves_again_after_a_reboot_without_a_deploy(
    sandbox: SandboxState, rebooted: Reboot
) -> None:
    ready = rebooted.readiness
    assert ready.ready, f"{ready.stage}: {ready.detail}"
    # systemd started the unit at boot: nobody ran a deploy.
    assert unit_started(sandbox, rebooted.unit) not in ("", rebooted.started_before)
    assert guest_sh(sandbox, f"systemctl is-enabled {rebooted.unit}") == "enabled"


def test_a_rerun_after_the_reboot_proves_the_new_server_and_changes_nothing_else(
    rebooted: Reboot,
) -> None:
    assert rebooted.readiness.ready, "the guest did not serve again after the reboot"
    run = pyinfra(*SERVE)
    assert run.rc == 0, run.tail()
    # The boot started a new server process: the rerun proves its answers once (the probe's
    # step is its one change); nothing the deploy set up was lost, so nothing else changed.
    changed = changed_ops(run.output, errors_too=True)
    assert set(changed) == {"post-deploy hooks | correctness of tiny-llama"}, changed
    assert "correctness OK for tiny-llama" in run.output, run.tail()
    again = pyinfra(*SERVE)
    assert again.rc == 0, again.tail()
    assert not changed_ops(again.output, errors_too=True), again.tail()
