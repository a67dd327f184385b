"""deploys/host.py on a real kernel: a Debian 12 VM booted through GRUB under QEMU TCG.

The kernel command line goes through /etc/default/grub and a real update-grub, the deploy
reboots the VM (allow_reboot) and verifies /proc/cmdline; sysctls, swap off and
modules-load.d are then checked in the kernel the VM came back with, again after a second
reboot that the deploy did not ask for (nothing it applied only once, at runtime or in its
first boot, is what the checks see), and a rerun reports zero changes. make test-vm builds
and boots the VM (tests/vm/build_vm.sh).

make test runs this beside other phases at idle CPU priority (tests/run_phases.py), so the VM
may get no CPU for a minute or more: every wait here is long and every ssh is retried, and a
slow VM is slow, never failed. What is checked is unchanged.
"""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import pytest

from tests.helpers import REPO, changed_ops, pyinfra

HOST = ("inventory/vm.py", "deploys/host.py")
KEY = REPO / ".sandbox" / "id_ed25519"
WANTED = ["amd_iommu=on", "intel_iommu=on", "iommu=pt", "pcie_aspm=off", "vfio-pci.ids=10de:2335"]


SSH = [
    *("ssh", "-i", str(KEY), "-p", "2222", "-o", "StrictHostKeyChecking=no"),
    *("-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR", "-o", "BatchMode=yes"),
    # QEMU's port forward accepts a connection while the VM is still booting and then sends
    # no banner: without these a poll during a reboot hangs until vm()'s timeout (120 s).
    *("-o", "ConnectTimeout=5", "-o", "ServerAliveInterval=5", "-o", "ServerAliveCountMax=2"),
    "root@127.0.0.1",
]


# A starved VM answers late, not never: an ssh that fails on its transport (no banner, a
# refused, reset or timed-out connection: what a booting or starved VM gives) or takes too
# long is tried again until this bound. Any other failure (a key refused, a command that
# fails) fails at once, with ssh's own words. The commands are reads, or a reboot that may
# be sent twice.
PATIENCE_S = 1200
REBOOT_WAIT_S = 1800
TRANSPORT = re.compile(
    r"Connection (refused|reset|closed)|banner exchange|kex_exchange_identification"
    r"|not responding|Broken pipe|timed out"
)


def vm(command: str, timeout: int = 120) -> str:
    deadline = time.monotonic() + PATIENCE_S
    while True:
        try:
            proc = subprocess.run([*SSH, command], text=True, capture_output=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            if time.monotonic() > deadline:
                raise
            continue
        said = (proc.stderr or "").strip()  # at LogLevel=ERROR a dropped connection may say nothing
        transport = proc.returncode == 255 and (not said or TRANSPORT.search(said))
        if not transport or time.monotonic() > deadline:
            break
        time.sleep(5)
    if proc.returncode != 0:
        raise AssertionError(f"ssh {command!r}: exit {proc.returncode}: {proc.stderr.strip()}")
    return proc.stdout.strip()


def boot_id() -> str:
    return vm("cat /proc/sys/kernel/random/boot_id")


def assert_tuned() -> None:
    cmdline = vm("cat /proc/cmdline").split()
    for param in WANTED:
        assert param in cmdline, cmdline
    assert vm("sysctl -n vm.swappiness kernel.numa_balancing vm.max_map_count").split() == [
        "0",
        "0",
        "1048576",
    ]
    assert vm("tail -n +2 /proc/swaps") == ""
    modules = {line.split()[0] for line in vm("lsmod").splitlines()[1:]}
    assert {"vfio", "vfio_iommu_type1", "vfio_pci"} <= modules, modules


@pytest.fixture(scope="module", autouse=True)
def booted_vm() -> None:
    if not Path(REPO / ".vm" / "qemu.pid").exists():
        pytest.fail("the VM is not running: make test-vm builds and boots it")
    vm("true")


def test_before_the_deploy_the_vm_has_swap_and_no_tuning() -> None:
    assert "/swapfile" in vm("cat /proc/swaps")
    assert "iommu=pt" not in vm("cat /proc/cmdline").split()


def test_host_deploy_edits_grub_reboots_and_verifies_proc_cmdline() -> None:
    before = boot_id()
    run = pyinfra(*HOST, timeout=3600)
    assert run.rc == 0, run.tail(80)
    assert "rebooting for the kernel command line" in run.output
    assert "/proc/cmdline has the wanted parameters" in run.output
    assert boot_id() != before
    grub = vm("grep ^GRUB_CMDLINE_LINUX_DEFAULT= /etc/default/grub")
    for param in WANTED:
        assert param in grub
    assert_tuned()


def test_everything_survives_a_second_reboot() -> None:
    before = boot_id()
    vm("systemctl --no-block reboot")  # returns at once: retried like any other call
    deadline = time.monotonic() + REBOOT_WAIT_S
    while time.monotonic() < deadline:
        try:
            if boot_id() != before:
                break
        except (subprocess.SubprocessError, AssertionError):
            pass
        time.sleep(5)
    assert boot_id() != before, "the VM did not come back"
    assert_tuned()


def test_a_rerun_after_the_reboots_reports_zero_changes() -> None:
    run = pyinfra(*HOST, timeout=3600)
    assert run.rc == 0, run.tail(80)
    changed = changed_ops(run.output)
    assert not changed, changed
