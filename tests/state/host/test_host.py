"""The Proxmox host's state: boot command line, sysctls, no swap, GPU modules, passthrough."""

from __future__ import annotations

import pytest

from llmhost.config.proxmox_host import ProxmoxHostConfig
from llmhost.facts.nvidia import parse_proc_devices
from llmhost.host_plan import (
    APT_PIN_FILE,
    MODPROBE_FILE,
    MODULES_FILE,
    SYSCTL_FILE,
    SYSTEMD_BOOT_CMDLINE,
    UDEV_RULE_FILE,
    plan,
)
from llmhost.kernel_cmdline import grub_params


def boot_params(host) -> list[str]:  # noqa: ANN001
    if host.file(SYSTEMD_BOOT_CMDLINE).exists:
        return host.file(SYSTEMD_BOOT_CMDLINE).content_string.split()
    return grub_params(host.file("/etc/default/grub").content_string) or []


def test_next_boot_has_the_profile_kernel_parameters(host, cfg: ProxmoxHostConfig) -> None:
    p = plan(cfg)
    params = boot_params(host)
    for wanted in p.kernel_params:
        assert wanted in params
    for unwanted in p.kernel_params_absent:
        assert not any(x == unwanted or x.split("=", 1)[0] == unwanted for x in params)


def test_sysctls_persist_and_apply_where_the_kernel_is_ours(
    host, cfg: ProxmoxHostConfig, in_container: bool
) -> None:
    text = host.file(SYSCTL_FILE).content_string
    for key, value in plan(cfg).sysctls.items():
        assert f"{key} = {value}\n" in text
        if not in_container:
            assert host.sysctl(key) == value


def test_swap_stays_off(host, in_container: bool) -> None:
    fstab = host.file("/etc/fstab").content_string.splitlines()
    live = [line for line in fstab if line.split()[2:3] == ["swap"] and not line.startswith("#")]
    assert not live, live
    if not in_container:
        assert host.file("/proc/swaps").content_string.count("\n") <= 1


def test_gpu_modules_and_options_load_at_boot(host, cfg: ProxmoxHostConfig) -> None:
    p = plan(cfg)
    modules = host.file(MODULES_FILE).content_string.split("\n")
    for module in p.modules:
        assert module in modules
    modprobe = host.file(MODPROBE_FILE).content_string
    if cfg.host_profile == "lxc-p2p":
        assert "options nvidia_uvm uvm_disable_hmm=1" in modprobe
        assert host.file(UDEV_RULE_FILE).contains("nvidia-modprobe -c0 -u")
        assert host.file(APT_PIN_FILE).contains(f"Pin: version {cfg.nvidia_driver_version}")
        assert host.service("nvidia-persistenced").is_enabled
    else:
        assert f"options vfio-pci ids={','.join(cfg.gpu_pci_ids)}" in modprobe


def test_lxc_guests_get_the_gpus_with_majors_from_proc_devices(
    host, cfg: ProxmoxHostConfig
) -> None:
    if cfg.host_profile != "lxc-p2p":
        pytest.skip(f"host_profile {cfg.host_profile}: GPUs go to VMs through vfio, not to LXC")
    majors = parse_proc_devices(host.file("/proc/devices").content_string.splitlines())
    for guest in cfg.lxc_guests:
        conf = host.file(f"/etc/pve/lxc/{guest.vmid}.conf").content_string
        main = conf.split("\n[")[0]
        assert f"lxc.cgroup2.devices.allow: c {majors['nvidia']}:* rwm" in main
        assert f"lxc.cgroup2.devices.allow: c {majors['nvidia-uvm']}:* rwm" in main
        assert "lxc.mount.entry: /dev/nvidia-uvm dev/nvidia-uvm" in main
        assert conf.count("# BEGIN llmhost gpu passthrough") == 1
