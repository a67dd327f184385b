"""After a reboot the guest serves by itself, and a rerun of the deploy changes nothing.

lxc-stop/lxc-start stops and boots the guest's systemd, as a host reboot does. Runs last:
the other tests leave tiny-llama converged.
"""

from __future__ import annotations

from llmhost.readiness import wait_ready
from llmhost.testbed import sandbox as sandbox_ctl
from llmhost.testbed.sandbox import SandboxState
from tests.integration.conftest import guest_sh, pyinfra
from tests.integration.test_serve_sandbox import SERVE, results_rows

UNIT = "llmhost-tiny-llama.service"


def unit_started(sandbox: SandboxState) -> str:
    return guest_sh(sandbox, f"systemctl show -p ExecMainStartTimestamp --value {UNIT}")


def test_the_guest_serves_again_after_a_reboot_without_a_deploy(sandbox: SandboxState) -> None:
    started_before = unit_started(sandbox)
    sandbox_ctl.reboot()
    sandbox_ctl.wait_ssh(sandbox_ctl.STATE_DIR / "id_ed25519")
    result = wait_ready(f"http://{sandbox.ip}:8000", "tiny-llama", 420, log=print)
    assert result.ready, f"{result.stage}: {result.detail}"
    # systemd started the unit at boot: nobody ran a deploy.
    assert unit_started(sandbox) not in ("", started_before)
    assert guest_sh(sandbox, f"systemctl is-enabled {UNIT}") == "enabled"


def test_a_rerun_after_the_reboot_reports_zero_changes(sandbox: SandboxState) -> None:
    run = pyinfra(*SERVE)
    assert run.rc == 0, run.tail()
    rows = results_rows(run.output)
    changed = {op: c for op, c in rows.items() if c[0] != "-" or c[1] != "-"}
    assert "Grand total" in rows and not changed, changed
