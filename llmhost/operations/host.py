"""Operations pyinfra has no equivalent for: kernel cmdline, guest config blocks, qm set.

Each reads a fact and yields commands only for a difference. The commands are the real ones
(`proxmox-boot-tool refresh`, `update-grub`, `pct reboot`, `qm set`); the test bed's stand-in
host has shims by those names that record them.
"""

from __future__ import annotations

import time
from io import StringIO

from pyinfra import host
from pyinfra.api import OperationError, operation
from pyinfra.context import state
from pyinfra.operations import files, server

from llmhost.facts.files import FileText
from llmhost.facts.host import GuestStatus, RunningCmdline
from llmhost.guest_boot import GuestKind, boot_set_command, config_path, start_command
from llmhost.host_plan import GRUB_DEFAULT, SYSTEMD_BOOT_CMDLINE, systemd_boot_cmdline
from llmhost.kernel_cmdline import edit_params, grub_params, reboot_needed, set_grub_params
from llmhost.lxc_passthrough import qm_set_commands, with_block
from llmhost.operations.failure import fails_its_host
from llmhost.operations.log import say


@operation()
@fails_its_host
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
            raise OperationError(f"{SYSTEMD_BOOT_CMDLINE} is missing on a systemd-boot host")
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
            raise OperationError(f"{GRUB_DEFAULT} is missing on a grub host")
        current = grub_params(text) or []
        wanted = edit_params(current, present, absent)
        if wanted == current and grub_params(text) is not None:
            host.noop(f"{GRUB_DEFAULT} already has the wanted parameters")
            return
        new_text, path, refresh = set_grub_params(text, wanted), GRUB_DEFAULT, "update-grub"
    else:
        raise OperationError(f"unknown boot loader {boot_loader!r}")
    yield from files.put._inner(src=StringIO(new_text), dest=path, mode="644")
    yield refresh


@operation()
@fails_its_host
def running_cmdline(
    present: list[str],
    absent: list[str],
    allow_reboot: bool,
    reboot_timeout_s: int,
):
    """
    Compare /proc/cmdline with the wanted set: say "reboot required", or reboot if allowed.

    + present: parameters the running kernel must have
    + absent: parameters it must not have
    + allow_reboot: group_data's consent to reboot this host (it stops every guest)
    + reboot_timeout_s: how long to wait for the host to come back
    """
    if not state.is_executing:
        return
    running = host.get_fact(RunningCmdline, nonce=str(time.monotonic()))
    problems = reboot_needed(running, present, absent)
    if not problems:
        host.noop("the running kernel has the wanted command line")
        return
    if not allow_reboot:
        say(
            "REBOOT REQUIRED: the running kernel "
            + ", ".join(problems)
            + " (set allow_reboot = True in group_data to let the deploy reboot)"
        )
        host.noop("reboot required, not allowed by group_data")
        return
    say("rebooting for the kernel command line: " + ", ".join(problems))
    yield from server.reboot._inner(delay=5, interval=5, reboot_timeout=reboot_timeout_s)


@operation()
@fails_its_host
def verify_cmdline(present: list[str], absent: list[str]):
    """
    After an allowed reboot the running kernel must have the wanted line, or the run fails.

    + present: parameters the running kernel must have
    + absent: parameters it must not have
    """
    if not state.is_executing:
        return
    running = host.get_fact(RunningCmdline, nonce=str(time.monotonic()))
    problems = reboot_needed(running, present, absent)
    if problems:
        raise OperationError(
            "after reboot /proc/cmdline still "
            + ", ".join(problems)
            + f"\n/proc/cmdline: {' '.join(running)}"
        )
    say("/proc/cmdline has the wanted parameters")
    host.noop("running kernel verified")
    yield from ()


@operation()
@fails_its_host
def guest_start_at_boot(kind: GuestKind, vmid: int, order: int):
    """
    The guest starts when its host boots, in its place: `onboot: 1`, `startup: order=N`.

    + kind: "lxc" (pct) or "kvm" (qm)
    + vmid: the guest
    + order: its place in Proxmox's start order (lower starts first)
    """
    path = config_path(kind, vmid)
    text = host.get_fact(FileText, path=path)
    if text is None:
        raise OperationError(f"{path} is missing: guest {vmid} is not on this host")
    command = boot_set_command(kind, vmid, text, order)
    if command is None:
        host.noop(f"guest {vmid} already starts at boot (order={order})")
        return
    yield command


@operation()
@fails_its_host
def guest_running(kind: GuestKind, vmid: int):
    """
    A guest found stopped is started, so that its own units come up and serve.

    + kind: "lxc" (pct) or "kvm" (qm)
    + vmid: the guest
    """
    status = host.get_fact(GuestStatus, kind=kind, vmid=vmid)
    if status is None:
        raise OperationError(f"{kind} guest {vmid}: its status cannot be read on this host")
    command = start_command(kind, vmid, status)
    if command is None:
        host.noop(f"guest {vmid} is {status}")
        return
    yield command


@operation()
@fails_its_host
def lxc_gpu_block(vmid: int, block: str):
    """
    The managed passthrough block in /etc/pve/lxc/<vmid>.conf; on a change, `pct reboot` of a
    running guest (a stopped one reads it when it starts).

    + vmid: the LXC guest
    + block: the rendered block (lxc_passthrough.passthrough_block)
    """
    path = f"/etc/pve/lxc/{vmid}.conf"
    conf = host.get_fact(FileText, path=path)
    if conf is None:
        raise OperationError(f"{path} does not exist: create LXC guest {vmid} first")
    new = with_block(conf + "\n", block)
    if new == conf + "\n" or new == conf:
        host.noop(f"{path} already shares the GPUs")
        return
    # /etc/pve is pmxcfs: no chmod/chown there, so the file is written without mode or owner.
    yield from files.put._inner(src=StringIO(new), dest=path)
    if host.get_fact(GuestStatus, kind="lxc", vmid=vmid) == "running":
        yield f"pct reboot {vmid}"


@operation()
@fails_its_host
def kvm_hostpci(vmid: int, addresses: list[str]):
    """
    hostpciN entries of KVM guest <vmid> through `qm set`, only those that differ.

    + vmid: the KVM guest
    + addresses: PCI addresses of its GPUs, in hostpci order
    """
    path = f"/etc/pve/qemu-server/{vmid}.conf"
    conf = host.get_fact(FileText, path=path)
    if conf is None:
        raise OperationError(f"{path} does not exist: create KVM guest {vmid} first")
    commands = qm_set_commands(vmid, conf, addresses)
    if not commands:
        host.noop(f"guest {vmid} already has its hostpci entries")
        return
    yield from commands


@operation()
@fails_its_host
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
    if not fstab_swaps and not (active_swaps and not in_container):
        host.noop("swap is off and stays off")


@operation()
@fails_its_host
def note(message: str):
    """
    Print a line about what this run could not do here; changes nothing.

    + message: what to say
    """
    if state.is_executing:
        say(message)
    host.noop(message)
    yield from ()
