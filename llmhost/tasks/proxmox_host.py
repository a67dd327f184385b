"""A Proxmox host ready for its serving guests, and still ready after any reboot.

Everything here is persistent configuration (files the next boot reads) plus, where the
running system allows, applying it now. What needs a reboot says so; it reboots only when
group_data allows it. On a fresh box whose NVIDIA modules are not loaded yet, the same run
loads them (after their options are written) and computes the passthrough block from
/proc/devices and /dev/nvidia* as they are after the load.
"""

from __future__ import annotations

from dataclasses import dataclass
from io import StringIO

from pyinfra import host
from pyinfra.api import deploy
from pyinfra.api.operation import OperationMeta
from pyinfra.operations import files, server, systemd
from pyinfra.operations.util import any_changed

from llmhost.config.proxmox_host import ProxmoxHostConfig
from llmhost.facts.host import ActiveSwaps, BootLoader, Container, FstabSwaps, RunningCmdline
from llmhost.facts.nvidia import (
    DeviceMajors,
    HostDriverVersion,
    NvidiaDeviceNodes,
    NvidiaKernelModule,
)
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
from llmhost.kernel_cmdline import reboot_needed
from llmhost.lxc_passthrough import passthrough_block, plan_module_load
from llmhost.operations.guests import (
    guest_running,
    guest_start_at_boot,
    kvm_hostpci,
    lxc_gpu_block,
)
from llmhost.operations.host import (
    kernel_cmdline,
    nvidia_modules_loaded,
    running_cmdline,
    swap_off,
    verify_cmdline,
)
from llmhost.operations.log import say
from llmhost.operations.refused import refuse_host


@dataclass(frozen=True)
class Preflight:
    """What the host's state allows, read before any operation.

    block: the LXC passthrough block ("" for kvm-vfio); None where this run loads the NVIDIA
    modules (a fresh box), so that the block is computed after the load, from the live
    /proc/devices and /dev/nvidia*. refused: why this host cannot be converged (an unknown
    boot loader, no driver installed for its kernel, another version than the pin loaded or on
    disk, device nodes that give no passthrough block): it alone fails, before any change on
    it, and the site's other hosts converge (llmhost/operations/refused.py).
    """

    loader: str
    block: str | None = ""
    refused: str | None = None


def preflight(cfg: ProxmoxHostConfig) -> Preflight:
    """Boot loader and passthrough block (None: computed after this run loads the NVIDIA
    modules), or why this host is refused."""
    loader = cfg.boot_loader if cfg.boot_loader != "auto" else host.get_fact(BootLoader)
    if loader is None:
        return Preflight(
            "",
            None,
            "cannot tell the boot loader (no /etc/kernel/proxmox-boot-uuids with "
            "/etc/kernel/cmdline, no /etc/default/grub); set boot_loader in group_data",
        )
    if cfg.host_profile != "lxc-p2p":
        return Preflight(loader)
    pin = cfg.nvidia_driver_version
    loaded = host.get_fact(HostDriverVersion)
    if loaded is not None and loaded != pin:
        return Preflight(
            loader,
            None,
            f"NVIDIA kernel module {loaded}, group_data pins nvidia_driver_version {pin}: "
            "install the pinned driver (with matching pve-headers for DKMS) before this deploy",
        )
    majors = host.get_fact(DeviceMajors)
    nodes = host.get_fact(NvidiaDeviceNodes)
    load = plan_module_load(majors, nodes, host.get_fact(NvidiaKernelModule), pin)
    if load.refusal:
        return Preflight(loader, None, load.refusal)
    if load.commands:
        return Preflight(loader, None)  # loaded by this run, its version checked after the load
    if loaded is None:
        return Preflight(
            loader,
            None,
            "/proc/devices lists the NVIDIA modules but their version cannot be read "
            f"(/proc/driver/nvidia/version, nvidia-smi); group_data pins "
            f"nvidia_driver_version {pin}",
        )
    try:
        block = passthrough_block(majors, nodes)
    except ValueError as exc:
        return Preflight(loader, None, str(exc))
    return Preflight(loader, block)


def put_text(name: str, text: str, dest: str) -> OperationMeta:
    return files.put(name=name, src=StringIO(text), dest=dest, mode="644")


def sysctls_and_swap(p: HostPlan, in_container: bool) -> None:
    """Sysctls persisted (and applied where the kernel is ours); swap off now and at boot."""
    put_text(f"sysctls in {SYSCTL_FILE}", render_sysctls(p), SYSCTL_FILE)
    if in_container:
        say(
            f"sysctls written to {SYSCTL_FILE}, not applied: a container cannot apply "
            "vm.*/kernel.* keys, the host kernel applies them at boot"
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


def boot_modules(p: HostPlan) -> None:
    """The profile's modules and their options at boot; the initramfs follows a change."""
    modules = put_text(f"modules at boot ({MODULES_FILE})", render_modules(p), MODULES_FILE)
    modprobe = put_text(f"module options ({MODPROBE_FILE})", render_modprobe(p), MODPROBE_FILE)
    server.shell(
        name="update-initramfs (module list or options changed)",
        commands=["update-initramfs -u -k all"],
        _if=any_changed(modules, modprobe),
    )


def nvidia_now(cfg: ProxmoxHostConfig) -> None:
    """lxc-p2p: the NVIDIA modules loaded now where they are not (a fresh box), after their
    options are written and before persistenced and the passthrough block need them."""
    nvidia_modules_loaded(
        name="NVIDIA modules loaded (nvidia, nvidia_uvm) and their /dev nodes",
        pin=cfg.nvidia_driver_version,
    )


def nvidia_at_boot(cfg: ProxmoxHostConfig) -> None:
    """lxc-p2p: /dev/nvidia-uvm created at boot, the driver held at its pin, persistenced on."""
    put_text("udev rule: /dev/nvidia-uvm at boot", render_udev_rule(), UDEV_RULE_FILE)
    put_text(
        f"hold the NVIDIA driver at {cfg.nvidia_driver_version}",
        render_apt_pin(cfg.nvidia_driver_version),
        APT_PIN_FILE,
    )
    unit = put_text("nvidia-persistenced unit", render_persistenced_unit(), PERSISTENCED_UNIT)
    systemd.daemon_reload(name="systemd daemon-reload", _if=unit.did_change)
    systemd.service(
        name="nvidia-persistenced enabled and running",
        service="nvidia-persistenced.service",
        enabled=True,
        running=True,
    )


def guests_back(cfg: ProxmoxHostConfig) -> None:
    """Each managed guest starts at boot, in order, and one found stopped is started now:
    after its passthrough (a stopped guest takes its new block or hostpci entries when it
    starts; hostpci cannot be hot-plugged into a running VM)."""
    guests = cfg.guests_to_start()
    for kind, vmid, order in guests:
        guest_start_at_boot(
            name=f"{kind.upper()} guest {vmid} starts at boot (order {order})",
            kind=kind,
            vmid=vmid,
            order=order,
        )
    for kind, vmid, _ in guests:
        guest_running(name=f"{kind.upper()} guest {vmid} running", kind=kind, vmid=vmid)


def guest_passthrough(cfg: ProxmoxHostConfig, block: str | None, p: HostPlan) -> None:
    """The GPUs into each guest: the LXC block (pct reboot on change), the VMs' hostpci."""
    if p.uses_nvidia_driver:
        for guest in cfg.lxc_guests:
            lxc_gpu_block(
                name=f"GPU passthrough block of LXC guest {guest.vmid} ({guest.name})",
                vmid=guest.vmid,
                block=block,
            )
    for vm in cfg.kvm_guests:
        if vm.pci_addresses:
            kvm_hostpci(
                name=f"hostpci entries of KVM guest {vm.vmid} ({vm.name})",
                vmid=vm.vmid,
                addresses=list(vm.pci_addresses),
            )


def running_kernel(cfg: ProxmoxHostConfig, p: HostPlan) -> None:
    """/proc/cmdline against the wanted set: reboot required (said now, while planning), or
    reboot and verify the line the host came back with."""
    problems = reboot_needed(host.get_fact(RunningCmdline), p.kernel_params, p.kernel_params_absent)
    if problems and not cfg.allow_reboot:
        say(
            "REBOOT REQUIRED: the running kernel "
            + ", ".join(problems)
            + " (set allow_reboot = True in group_data to let the deploy reboot)"
        )
    elif problems:
        say("rebooting for the kernel command line: " + ", ".join(problems))
    reboot = running_cmdline(
        name="running kernel command line",
        present=p.kernel_params,
        absent=p.kernel_params_absent,
        allow_reboot=cfg.allow_reboot,
        reboot_timeout_s=cfg.reboot_timeout_s,
    )
    if cfg.allow_reboot:
        verify_cmdline(
            name="/proc/cmdline after reboot",
            present=p.kernel_params,
            absent=p.kernel_params_absent,
            _if=reboot.did_change,
        )


@deploy("Proxmox host: kernel, sysctls, swap, GPU modules, guests at boot and passthrough")
def proxmox_host(cfg: ProxmoxHostConfig) -> None:
    pre = preflight(cfg)
    if pre.refused:
        refuse_host("the host's boot loader or NVIDIA driver", pre.refused)
        return
    p: HostPlan = plan(cfg)
    kernel_cmdline(
        name=f"kernel command line ({pre.loader})",
        boot_loader=pre.loader,
        present=p.kernel_params,
        absent=p.kernel_params_absent,
    )
    sysctls_and_swap(p, in_container=host.get_fact(Container) != "none")
    boot_modules(p)
    if p.uses_nvidia_driver:
        nvidia_now(cfg)
        nvidia_at_boot(cfg)
    guest_passthrough(cfg, pre.block, p)
    guests_back(cfg)
    running_kernel(cfg, p)
