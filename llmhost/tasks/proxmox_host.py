"""A Proxmox host ready for its serving guests, and still ready after any reboot.

Everything here is persistent configuration (files the next boot reads) plus, where the
running system allows, applying it now. What needs a reboot says so; it reboots only when
group_data allows it.
"""

from __future__ import annotations

from io import StringIO

from pyinfra import host
from pyinfra.api import deploy
from pyinfra.api.exceptions import PyinfraError
from pyinfra.operations import files, server, systemd
from pyinfra.operations.util import any_changed

from llmhost.config.proxmox_host import ProxmoxHostConfig
from llmhost.facts.host import ActiveSwaps, BootLoader, Container, FstabSwaps
from llmhost.facts.nvidia import DeviceMajors, HostDriverVersion, NvidiaDeviceNodes
from llmhost.host_plan import (
    APT_PIN_FILE,
    MODPROBE_FILE,
    MODULES_FILE,
    PERSISTENCED_UNIT,
    SYSCTL_FILE,
    UDEV_RULE_FILE,
    HostPlan,
    plan,
    render_apt_pin,
    render_modprobe,
    render_modules,
    render_persistenced_unit,
    render_sysctls,
    render_udev_rule,
)
from llmhost.lxc_passthrough import passthrough_block
from llmhost.operations.host import (
    host_command,
    kernel_cmdline,
    kvm_hostpci,
    lxc_gpu_block,
    note,
    running_cmdline,
    swap_off,
    verify_cmdline,
)


class HostStateError(PyinfraError):
    """The host is not in a state this deploy can build on; raised before any operation."""


def fact_root(cfg: ProxmoxHostConfig) -> str:
    return cfg.stand_in.fact_root if cfg.stand_in else "/"


def preflight(cfg: ProxmoxHostConfig) -> tuple[str, str]:
    """Boot loader and passthrough block, or stop before anything changes."""
    loader = cfg.boot_loader if cfg.boot_loader != "auto" else host.get_fact(BootLoader)
    if loader is None:
        raise HostStateError(
            f"{host.name}: cannot tell the boot loader (no /etc/kernel/proxmox-boot-uuids with "
            "/etc/kernel/cmdline, no /etc/default/grub); set boot_loader in group_data"
        )
    block = ""
    if cfg.host_profile == "lxc-p2p":
        loaded = host.get_fact(HostDriverVersion, root=fact_root(cfg))
        if loaded != cfg.nvidia_driver_version:
            raise HostStateError(
                f"{host.name}: NVIDIA kernel module {loaded or 'not loaded'}, group_data pins "
                f"nvidia_driver_version {cfg.nvidia_driver_version}: install the pinned driver "
                "(with matching pve-headers for DKMS) before this deploy"
            )
        majors = host.get_fact(DeviceMajors, root=fact_root(cfg))
        nodes = host.get_fact(NvidiaDeviceNodes, root=fact_root(cfg))
        try:
            block = passthrough_block(majors, nodes)
        except ValueError as exc:
            raise HostStateError(f"{host.name}: {exc}") from None
    return loader, block


@deploy("Proxmox host: kernel, sysctls, swap, GPU modules and passthrough")
def proxmox_host(cfg: ProxmoxHostConfig) -> None:
    loader, block = preflight(cfg)
    p: HostPlan = plan(cfg)
    stand_in = cfg.stand_in
    in_container = host.get_fact(Container) != "none"

    kernel_cmdline(
        name=f"kernel command line ({loader})",
        boot_loader=loader,
        present=p.kernel_params,
        absent=p.kernel_params_absent,
        stand_in=stand_in,
    )

    files.put(
        name=f"sysctls in {SYSCTL_FILE}",
        src=StringIO(render_sysctls(p)),
        dest=SYSCTL_FILE,
        mode="644",
    )
    if in_container:
        note(
            name="sysctls not applied (container)",
            message=f"sysctls written to {SYSCTL_FILE}; a container cannot apply vm.*/kernel.* "
            "keys, the host kernel applies them at boot",
        )
    else:
        for key, value in sorted(p.sysctls.items()):
            server.sysctl(name=f"sysctl {key} = {value} (now)", key=key, value=value)

    swap_off(
        name="swap off, now and after reboot",
        fstab_swaps=host.get_fact(FstabSwaps),
        active_swaps=host.get_fact(ActiveSwaps),
        in_container=in_container,
    )

    modules = files.put(
        name=f"modules at boot ({MODULES_FILE})",
        src=StringIO(render_modules(p)),
        dest=MODULES_FILE,
        mode="644",
    )
    modprobe = files.put(
        name=f"module options ({MODPROBE_FILE})",
        src=StringIO(render_modprobe(p)),
        dest=MODPROBE_FILE,
        mode="644",
    )
    server.shell(
        name="update-initramfs (module list or options changed)",
        commands=[host_command(stand_in, "update-initramfs -u -k all")],
        _if=any_changed(modules, modprobe),
    )

    if p.uses_nvidia_driver:
        files.put(
            name="udev rule: /dev/nvidia-uvm at boot",
            src=StringIO(render_udev_rule()),
            dest=UDEV_RULE_FILE,
            mode="644",
        )
        files.put(
            name=f"hold the NVIDIA driver at {cfg.nvidia_driver_version}",
            src=StringIO(render_apt_pin(cfg.nvidia_driver_version)),
            dest=APT_PIN_FILE,
            mode="644",
        )
        unit = files.put(
            name="nvidia-persistenced unit",
            src=StringIO(render_persistenced_unit()),
            dest=PERSISTENCED_UNIT,
            mode="644",
        )
        systemd.daemon_reload(name="systemd daemon-reload", _if=unit.did_change)
        systemd.service(
            name="nvidia-persistenced enabled" + ("" if stand_in else " and running"),
            service="nvidia-persistenced.service",
            enabled=True,
            running=None if stand_in else True,
        )
        for guest in cfg.lxc_guests:
            lxc_gpu_block(
                name=f"GPU passthrough block of LXC guest {guest.vmid} ({guest.name})",
                vmid=guest.vmid,
                block=block,
                stand_in=stand_in,
            )

    for vm in cfg.kvm_guests:
        if vm.pci_addresses:
            kvm_hostpci(
                name=f"hostpci entries of KVM guest {vm.vmid} ({vm.name})",
                vmid=vm.vmid,
                addresses=list(vm.pci_addresses),
                stand_in=stand_in,
            )

    running_cmdline(
        name="running kernel command line",
        present=p.kernel_params,
        absent=p.kernel_params_absent,
        allow_reboot=cfg.allow_reboot,
        reboot_timeout_s=cfg.reboot_timeout_s,
        root=fact_root(cfg),
    )
    if cfg.allow_reboot:
        verify_cmdline(
            name="/proc/cmdline after reboot",
            present=p.kernel_params,
            absent=p.kernel_params_absent,
            root=fact_root(cfg),
        )
