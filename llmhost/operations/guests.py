"""A Proxmox host's guests: started at boot in order, started when found stopped, the GPU
passthrough block of an LXC guest, the hostpci entries of a KVM guest.

Each reads a fact and yields commands only for a difference. The commands are the real ones
(`pct set`, `pct start`, `pct reboot`, `qm set`); the test bed's stand-in host has shims by
those names that record them.
"""

from __future__ import annotations

from io import StringIO

from pyinfra import host
from pyinfra.api import operation
from pyinfra.operations import files

from llmhost.facts.files import FileText
from llmhost.facts.host import GuestStatus
from llmhost.guest_boot import GuestKind, boot_set_command, config_path, start_command
from llmhost.lxc_passthrough import qm_set_commands, with_block
from llmhost.operations.step import refusal


@operation()
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
        yield refusal(f"{path} is missing: guest {vmid} is not on this host")
        return
    command = boot_set_command(kind, vmid, text, order)
    if command is None:
        host.noop(f"guest {vmid} already starts at boot (order={order})")
        return
    yield command


@operation()
def guest_running(kind: GuestKind, vmid: int):
    """
    A guest found stopped is started, so that its own units come up and serve.

    + kind: "lxc" (pct) or "kvm" (qm)
    + vmid: the guest
    """
    status = host.get_fact(GuestStatus, kind=kind, vmid=vmid)
    if status is None:
        yield refusal(f"{kind} guest {vmid}: its status cannot be read on this host")
        return
    command = start_command(kind, vmid, status)
    if command is None:
        host.noop(f"guest {vmid} is {status}")
        return
    yield command


@operation()
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
        yield refusal(f"{path} does not exist: create LXC guest {vmid} first")
        return
    new = with_block(conf + "\n", block)
    if new == conf + "\n" or new == conf:
        host.noop(f"{path} already shares the GPUs")
        return
    # /etc/pve is pmxcfs: no chmod/chown there, so the file is written without mode or owner.
    yield from files.put._inner(src=StringIO(new), dest=path)
    if host.get_fact(GuestStatus, kind="lxc", vmid=vmid) == "running":
        yield f"pct reboot {vmid}"


@operation()
def kvm_hostpci(vmid: int, addresses: list[str]):
    """
    hostpciN entries of KVM guest <vmid> through `qm set`, only those that differ.

    + vmid: the KVM guest
    + addresses: PCI addresses of its GPUs, in hostpci order
    """
    path = f"/etc/pve/qemu-server/{vmid}.conf"
    conf = host.get_fact(FileText, path=path)
    if conf is None:
        yield refusal(f"{path} does not exist: create KVM guest {vmid} first")
        return
    commands = qm_set_commands(vmid, conf, addresses)
    if not commands:
        host.noop(f"guest {vmid} already has its hostpci entries")
        return
    yield from commands
