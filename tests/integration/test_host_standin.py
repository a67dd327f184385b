"""deploys/host.py against a Debian 12 container standing in for a Proxmox host.

The container has the host's files (/etc/pve as plain directories, /etc/kernel/cmdline, an
fstab with swap) and, from the test bed, the H200 box's /proc/devices and /proc/cmdline bound
over its own, /dev/nvidia* character devices and an nvidia-smi answering from captures; pct,
qm, proxmox-boot-tool, update-grub and update-initramfs are shims that record their argv
instead of running, and the tests named "..._not_executed" assert those exact command lines.
Every test starts from the converged seed state (module fixture) and restores what it changes.
The fresh-box tests reset the stand-in with its NVIDIA modules not loaded, or not installed
(standin.reset(modules=...)), and give it back the seed state, converged, when they end.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from llmhost.testbed import standin
from tests.helpers import (
    Run,
    changed_ops,
    pyinfra,
    refusal_summary,
    refused_only,
    started_operations,
)

HOST = ("inventory/sandbox.py", "deploys/host.py")
STANDIN_IP = "10.99.0.13"  # the stand-in, as inventory/sandbox.py names it
LOG = standin.COMMAND_LOG
SNAPSHOT = (
    "cat /etc/kernel/cmdline /etc/pve/lxc/201.conf /etc/fstab; "
    "sha256sum /etc/sysctl.d/* /etc/modprobe.d/* /etc/modules-load.d/* 2>/dev/null; "
    f"cat {LOG} 2>/dev/null || true"
)


def sh(command: str) -> str:
    return (standin.ssh(command) or "").strip()


def recorded() -> list[str]:
    return sh(f"cat {LOG} 2>/dev/null || true").splitlines()


@dataclass(frozen=True)
class FirstConverge:
    run: Run
    recorded: list[str]


@pytest.fixture(scope="module")
def first_converge() -> FirstConverge:
    """A freshly reset stand-in converged once; what that run printed and recorded."""
    standin.up()
    standin.reset()
    run = pyinfra(*HOST)
    assert run.rc == 0, run.tail()
    return FirstConverge(run, recorded())


def test_host_deploy_converges_the_standin_and_says_reboot_required(
    first_converge: FirstConverge,
) -> None:
    run = first_converge.run
    assert "REBOOT REQUIRED: the running kernel missing iommu=off" in run.output
    assert "a container cannot apply vm.*/kernel.* keys" in run.output
    cmdline = sh("cat /etc/kernel/cmdline").split()
    assert cmdline[:3] == ["root=ZFS=rpool/ROOT/pve-1", "boot=zfs", "quiet"]
    assert {"iommu=off", "amd_iommu=off", "pcie_aspm=off", "pcie_port_pm=off"} <= set(cmdline)
    assert "# disabled by llmhost: /dev/pve/swap none swap sw 0 0" in sh("cat /etc/fstab")
    conf = sh("cat /etc/pve/lxc/201.conf")
    main, snapshot = conf.split("\n[pre-upgrade]\n")
    assert "lxc.cgroup2.devices.allow: c 238:* rwm" in main  # H200's uvm major, from the fact
    assert "lxc.mount.entry: /dev/nvidia0 dev/nvidia0 none bind,optional,create=file" in main
    assert "llmhost" not in snapshot and "snaptime: 1780000000" in snapshot
    assert sh("systemctl is-enabled nvidia-persistenced.service") == "enabled"
    assert sh("systemctl is-active nvidia-persistenced.service") == "active"


def test_proxmox_commands_are_recorded_not_executed(first_converge: FirstConverge) -> None:
    assert first_converge.recorded == [
        "proxmox-boot-tool refresh",
        "update-initramfs -u -k all",
        "pct reboot 201",
        "pct set 201 --onboot 1 --startup order=1",
        "qm set 301 --onboot 1 --startup order=2",
    ]


def test_every_guest_starts_at_boot_in_order_and_a_stopped_one_is_started(
    first_converge: FirstConverge,
) -> None:
    lxc, snapshot = sh("cat /etc/pve/lxc/201.conf").split("\n[pre-upgrade]\n")
    assert "onboot: 1" in lxc.splitlines() and "startup: order=1" in lxc.splitlines()
    assert "onboot" not in snapshot  # a snapshot's keys are its own
    kvm = sh("cat /etc/pve/qemu-server/301.conf").splitlines()
    assert "onboot: 1" in kvm and "startup: order=2" in kvm
    # The KVM guest (the shim keeps its state; 201 is the real sandbox container) found
    # stopped is started; nothing else changes.
    sh("qm stop 301")
    assert sh("qm status 301") == "status: stopped"
    mark = len(recorded())
    run = pyinfra(*HOST)
    assert run.rc == 0, run.tail()
    assert recorded()[mark:] == ["qm start 301"]
    assert set(changed_ops(run.output)) == {
        "Proxmox host: kernel, sysctls, swap, GPU modules, guests at boot and passthrough | "
        "KVM guest 301 running"
    }
    assert sh("qm status 301") == "status: running"


def test_second_run_reports_zero_changes_and_reboots_no_guest(
    first_converge: FirstConverge,
) -> None:
    mark = len(recorded())
    run = pyinfra(*HOST)
    assert run.rc == 0, run.tail()
    assert not changed_ops(run.output)
    assert recorded()[mark:] == []


def test_a_new_uvm_major_rewrites_the_block_and_pct_reboot_not_executed(
    first_converge: FirstConverge,
) -> None:
    # After a driver update nvidia-uvm may get another major: the block follows the fact.
    mark = len(recorded())
    standin.edit_capture("proc/devices", "s/^238 nvidia-uvm$/511 nvidia-uvm/")
    try:
        assert "511 nvidia-uvm" in sh("cat /proc/devices")  # what the fact reads
        run = pyinfra(*HOST)
        assert run.rc == 0, run.tail()
        assert set(changed_ops(run.output)) == {
            "Proxmox host: kernel, sysctls, swap, GPU modules, guests at boot and passthrough | "
            "GPU passthrough block of LXC guest 201 (llm-lxc)"
        }
        conf = sh("cat /etc/pve/lxc/201.conf")
        assert "c 511:* rwm" in conf and "c 238:* rwm" not in conf
        assert conf.count("# BEGIN llmhost gpu passthrough") == 1
        assert recorded()[mark:] == ["pct reboot 201"]
    finally:
        standin.edit_capture("proc/devices", "s/^511 nvidia-uvm$/238 nvidia-uvm/")
    assert pyinfra(*HOST).rc == 0


def test_a_driver_other_than_the_pin_refuses_the_host_before_any_change(
    first_converge: FirstConverge,
) -> None:
    """The host alone is refused (one failing operation, nothing else on it), not the run
    stopped while preparing; its last lines name it."""
    before = sh(SNAPSHOT)
    run = pyinfra(*HOST, "--data", "nvidia_driver_version=590.48.01")
    assert run.rc != 0
    why = "NVIDIA kernel module 580.159.04, group_data pins nvidia_driver_version 590.48.01"
    assert why in run.output, run.tail()
    assert started_operations(run.output) == ["refused: the host's boot loader or NVIDIA driver"]
    assert refusal_summary(run.output) == [
        f"{STANDIN_IP}: {why}: install the pinned driver "
        "(with matching pve-headers for DKMS) before this deploy"
    ]
    assert sh(SNAPSHOT) == before


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (["host_profile=lxc"], "host_profile: got 'lxc'"),
        (['kernel_params=["iommu=off pcie_aspm=off"]'], "no spaces or quotes"),
        (['lxc_guests=[{"vmid": "two-oh-one", "name": "x"}]'], "lxc_guests.0.vmid"),
        (['gpu_pci_ids=["10de-2bb5"]'], "not a vendor:device id"),
    ],
)
def test_bad_host_data_is_refused_before_anything_changes(
    first_converge: FirstConverge, data: list[str], message: str
) -> None:
    before = sh(SNAPSHOT)
    args = [a for d in data for a in ("--data", d)]
    run = pyinfra(*HOST, *args)
    assert run.rc != 0
    assert "invalid group_data for host '10.99.0.13'" in run.output and message in run.output
    assert "Starting operation" not in run.output
    assert sh(SNAPSHOT) == before


def test_grub_boot_loader_edits_grub_default_and_update_grub_not_executed(
    first_converge: FirstConverge,
) -> None:
    mark = len(recorded())
    sh(
        'printf \'GRUB_DEFAULT=0\\nGRUB_CMDLINE_LINUX_DEFAULT="quiet"\\nGRUB_CMDLINE_LINUX=""\\n\''
        " > /etc/default/grub"
    )
    try:
        run = pyinfra(*HOST, "--data", "boot_loader=grub")
        assert run.rc == 0, run.tail()
        grub = sh("cat /etc/default/grub").splitlines()
        assert grub[1] == (
            'GRUB_CMDLINE_LINUX_DEFAULT="quiet iommu=off amd_iommu=off pcie_aspm=off '
            'pcie_port_pm=off"'
        )
        assert grub[2] == 'GRUB_CMDLINE_LINUX=""'
        assert recorded()[mark:] == ["update-grub"]
        again = pyinfra(*HOST, "--data", "boot_loader=grub")
        assert again.rc == 0 and not changed_ops(again.output)
    finally:
        sh("rm -f /etc/default/grub")


def test_kvm_vfio_profile_binds_vfio_and_qm_set_not_executed(
    first_converge: FirstConverge,
) -> None:
    vm = '[{"vmid": 301, "name": "llm-vm", "pci_addresses": ["0000:00:06.0"]}]'
    kvm = [
        "--data",
        "host_profile=kvm-vfio",
        "--data",
        'gpu_pci_ids=["10de:2335"]',
        "--data",
        f"kvm_guests={vm}",
    ]
    mark = len(recorded())
    try:
        run = pyinfra(*HOST, *kvm)
        assert run.rc == 0, run.tail()
        cmdline = sh("cat /etc/kernel/cmdline").split()
        assert {"iommu=pt", "amd_iommu=on", "vfio-pci.ids=10de:2335"} <= set(cmdline)
        assert "iommu=off" not in cmdline and "amd_iommu=off" not in cmdline
        assert "options vfio-pci ids=10de:2335 disable_vga=1" in sh(
            "cat /etc/modprobe.d/llmhost.conf"
        )
        assert sh("cat /etc/modules-load.d/llmhost.conf").splitlines()[1:] == [
            "vfio",
            "vfio_iommu_type1",
            "vfio_pci",
        ]
        assert recorded()[mark:] == [
            "proxmox-boot-tool refresh",
            "update-initramfs -u -k all",
            "qm set 301 --hostpci0 0000:00:06.0,pcie=1",
        ]
    finally:
        # Back to the site's profile: the same edits in reverse, the LXC block untouched.
        back = pyinfra(*HOST)
        assert back.rc == 0, back.tail()
    assert "iommu=off" in sh("cat /etc/kernel/cmdline").split()


def test_the_standin_rebooted_keeps_its_state_and_a_rerun_changes_nothing(
    first_converge: FirstConverge,
) -> None:
    standin.reboot()
    # The test bed's hardware comes back with the boot: the facts still read the H200 box.
    assert "238 nvidia-uvm" in sh("cat /proc/devices")
    assert sh("test -c /dev/nvidia-uvm && echo char") == "char"
    run = pyinfra(*HOST)
    assert run.rc == 0, run.tail()
    assert not changed_ops(run.output)


DEPLOY = "Proxmox host: kernel, sysctls, swap, GPU modules, guests at boot and passthrough"
LOAD = f"{DEPLOY} | NVIDIA modules loaded (nvidia, nvidia_uvm) and their /dev nodes"


def test_a_fresh_box_loads_the_nvidia_modules_and_converges_in_one_run(
    first_converge: FirstConverge,
) -> None:
    # A fresh box: the driver installed for its kernel, its modules not loaded yet (no nvidia
    # major in /proc/devices, no /proc/driver/nvidia, no /dev/nvidia* node).
    standin.reset(modules="unloaded")
    try:
        assert "nvidia" not in sh("cat /proc/devices")
        assert sh("find /dev -maxdepth 2 -name 'nvidia*' -type c") == ""
        run = pyinfra(*HOST)
        assert run.rc == 0, run.tail()
        assert LOAD in changed_ops(run.output), run.tail()
        assert "238 nvidia-uvm" in sh("cat /proc/devices")
        # Loaded after /etc/modprobe.d was written: nvidia_uvm got its option at load.
        assert sh(f"cat {standin.FACT_ROOT}/module-options/nvidia_uvm") == "uvm_disable_hmm=1"
        main = sh("cat /etc/pve/lxc/201.conf").split("\n[pre-upgrade]\n")[0]
        assert main.count("# BEGIN llmhost gpu passthrough") == 1
        assert "lxc.cgroup2.devices.allow: c 238:* rwm" in main  # the uvm major, read after
        assert "lxc.mount.entry: /dev/nvidia-uvm dev/nvidia-uvm none bind,optional" in main
        assert "lxc.mount.entry: /dev/nvidia0 dev/nvidia0 none bind,optional" in main
        assert "lxc.mount.entry: /dev/nvidiactl dev/nvidiactl none bind,optional" in main
        assert recorded() == [  # as the seed's first converge, the block's reboot included
            "proxmox-boot-tool refresh",
            "update-initramfs -u -k all",
            "pct reboot 201",
            "pct set 201 --onboot 1 --startup order=1",
            "qm set 301 --onboot 1 --startup order=2",
        ]
        again = pyinfra(*HOST)
        assert again.rc == 0, again.tail()
        assert not changed_ops(again.output)
    finally:
        standin.reset()
        back = pyinfra(*HOST)
        assert back.rc == 0, back.tail()


def test_a_box_without_the_nvidia_driver_is_refused_naming_what_to_install(
    first_converge: FirstConverge,
) -> None:
    standin.reset(modules="absent")
    try:
        before = sh(SNAPSHOT)
        run = pyinfra(*HOST)
        assert run.rc != 0
        assert refused_only(run.output), run.tail()
        assert "no NVIDIA kernel module is installed for kernel" in run.output, run.tail()
        summary = refusal_summary(run.output)
        assert len(summary) == 1 and summary[0].startswith(f"{STANDIN_IP}: no NVIDIA kernel")
        assert "install NVIDIA driver 580.159.04 with the pve-headers of kernel" in run.output
        assert sh(SNAPSHOT) == before  # nothing on the host changed
    finally:
        standin.reset()
        back = pyinfra(*HOST)
        assert back.rc == 0, back.tail()
