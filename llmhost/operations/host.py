"""A Proxmox host's own kernel and memory: the kernel command line (and the reboot it may
need), swap off, the NVIDIA modules loaded on a fresh box; operations pyinfra has no
equivalent for. The guests' side of the host is in operations/guests.py.

Each reads a fact and yields commands only for a difference. The commands are the real ones
(`proxmox-boot-tool refresh`, `update-grub`); the test bed's stand-in host has shims by those
names that record them.
"""

from __future__ import annotations

import functools
from io import StringIO

from pyinfra import host
from pyinfra.api import OperationError, operation
from pyinfra.operations import files, server

from llmhost.facts.files import FileText
from llmhost.facts.host import RunningCmdline
from llmhost.facts.nvidia import (
    DeviceMajors,
    HostDriverVersion,
    NvidiaDeviceNodes,
    NvidiaKernelModule,
)
from llmhost.host_plan import GRUB_DEFAULT, SYSTEMD_BOOT_CMDLINE, systemd_boot_cmdline
from llmhost.kernel_cmdline import edit_params, grub_params, reboot_needed, set_grub_params
from llmhost.lxc_passthrough import plan_module_load
from llmhost.operations.log import say
from llmhost.operations.step import engine_step, refusal


@operation()
def kernel_cmdline(boot_loader: str, present: list[str], absent: list[str]):
    """
    Add/remove kernel parameters in the file the next boot reads; refresh the boot loader.

    + boot_loader: "systemd-boot" (/etc/kernel/cmdline) or "grub" (/etc/default/grub)
    + present: parameters to set (name=value replaces the same name)
    + absent: parameters to remove (a bare name removes every value)
    """
    if boot_loader == "systemd-boot":
        text = host.get_fact(FileText, path=SYSTEMD_BOOT_CMDLINE)
        if text is None:
            yield refusal(f"{SYSTEMD_BOOT_CMDLINE} is missing on a systemd-boot host")
            return
        current = text.split()
        wanted = edit_params(current, present, absent)
        if wanted == current:
            host.noop(f"{SYSTEMD_BOOT_CMDLINE} already has the wanted parameters")
            return
        new_text, path, refresh = (
            systemd_boot_cmdline(wanted),
            SYSTEMD_BOOT_CMDLINE,
            "proxmox-boot-tool refresh",
        )
    elif boot_loader == "grub":
        text = host.get_fact(FileText, path=GRUB_DEFAULT)
        if text is None:
            yield refusal(f"{GRUB_DEFAULT} is missing on a grub host")
            return
        current = grub_params(text) or []
        wanted = edit_params(current, present, absent)
        if wanted == current and grub_params(text) is not None:
            host.noop(f"{GRUB_DEFAULT} already has the wanted parameters")
            return
        new_text, path, refresh = set_grub_params(text, wanted), GRUB_DEFAULT, "update-grub"
    else:
        yield refusal(f"unknown boot loader {boot_loader!r}")
        return
    yield from files.put._inner(src=StringIO(new_text), dest=path, mode="644")
    yield refresh


@operation()
def running_cmdline(
    present: list[str],
    absent: list[str],
    allow_reboot: bool,
    reboot_timeout_s: int,
):
    """
    Reboot into the wanted kernel command line when /proc/cmdline lacks it and group_data
    allows it; otherwise change nothing (the task prints "REBOOT REQUIRED").

    + present: parameters the running kernel must have
    + absent: parameters it must not have
    + allow_reboot: group_data's consent to reboot this host (it stops every guest)
    + reboot_timeout_s: how long to wait for the host to come back
    """
    problems = reboot_needed(host.get_fact(RunningCmdline), present, absent)
    if not problems:
        host.noop("the running kernel has the wanted command line")
    elif not allow_reboot:
        host.noop("reboot required, not allowed by group_data")
    else:
        yield from server.reboot._inner(delay=5, interval=5, reboot_timeout=reboot_timeout_s)


def cmdline_after_reboot(present: list[str], absent: list[str]) -> None:
    """/proc/cmdline read now, after the reboot: the wanted line, or the host fails."""
    running = host.get_fact(RunningCmdline)
    problems = reboot_needed(running, present, absent)
    if problems:
        raise OperationError(
            "after reboot /proc/cmdline still "
            + ", ".join(problems)
            + f"\n/proc/cmdline: {' '.join(running)}"
        )
    say("/proc/cmdline has the wanted parameters")


@operation()
def verify_cmdline(present: list[str], absent: list[str]):
    """
    After the reboot, the running kernel must have the wanted line, or the host fails. Call it
    with `_if=` the reboot operation's `did_change`: it runs only after a reboot.

    + present: parameters the running kernel must have
    + absent: parameters it must not have
    """
    yield engine_step(
        functools.partial(cmdline_after_reboot, present, absent), shown=("cat /proc/cmdline",)
    )


@operation()
def swap_off(fstab_swaps: list[str], active_swaps: list[str], in_container: bool):
    """
    No swap now and none after a reboot: fstab swap lines commented out, swapoff -a.

    + fstab_swaps: uncommented swap lines of /etc/fstab (FstabSwaps fact)
    + active_swaps: swap devices in use (ActiveSwaps fact)
    + in_container: a container cannot turn the kernel's swap off; it says so instead
    """
    if fstab_swaps:
        yield (
            "sed -i -E 's|^([^#[:space:]][^[:space:]]*[[:space:]]+[^[:space:]]+[[:space:]]+"
            "swap[[:space:]].*)$|# disabled by llmhost: \\1|' /etc/fstab"
        )
    if active_swaps and not in_container:
        yield "swapoff -a"
    elif active_swaps:
        say(f"swap is on ({', '.join(active_swaps)}) but a container cannot turn it off")
    if not fstab_swaps and not active_swaps:
        host.noop("swap is off and stays off")


def loaded_module_is_pin(pin: str) -> None:
    """The module loaded now, after this run's modprobe, is the pinned driver, or the host
    fails naming both (an older module on disk than apt's pin, a DKMS build that failed)."""
    found = host.get_fact(HostDriverVersion)
    if found != pin:
        raise OperationError(
            f"NVIDIA kernel module {found or 'not loaded'} after modprobe, group_data pins "
            f"nvidia_driver_version {pin}: install the pinned driver (with matching pve-headers "
            "for DKMS), then run this deploy again"
        )
    say(f"NVIDIA kernel module {found} loaded (the pin)")


@operation()
def nvidia_modules_loaded(pin: str):
    """
    On a host whose NVIDIA modules are not loaded yet (a fresh box: the modules-load.d file
    that loads them at boot comes with this run), `modprobe nvidia`, `modprobe nvidia_uvm`,
    the /dev/nvidia* nodes created with nvidia-modprobe, and the loaded module checked
    against the pin; nothing where they are loaded and their nodes exist. Run it after the
    module options are written (options nvidia_uvm uvm_disable_hmm=1 applies at load).

    + pin: group_data's nvidia_driver_version
    """
    load = plan_module_load(
        host.get_fact(DeviceMajors),
        host.get_fact(NvidiaDeviceNodes),
        host.get_fact(NvidiaKernelModule),
        pin,
    )
    if load.refusal:
        yield refusal(load.refusal)
        return
    if not load.commands:
        host.noop("the NVIDIA modules are loaded and their /dev nodes exist")
        return
    say("NVIDIA modules to load, nodes to create: " + ", ".join(load.missing))
    yield from load.commands
    yield engine_step(
        functools.partial(loaded_module_is_pin, pin), shown=("cat /proc/driver/nvidia/version",)
    )
