"""A Proxmox host's guests: started at boot in order, started when found stopped, the GPU
passthrough block of an LXC guest, the hostpci entries of a KVM guest.

Each reads a fact and yields commands only for a difference. The commands are the real ones
(`pct set`, `pct start`, `pct reboot`, `qm set`); the test bed's stand-in host has shims by
those names that record them.
"""

from __future__ import annotations

import functools
import re
from io import StringIO

from pyinfra import host
from pyinfra.api import OperationError, StringCommand, operation
from pyinfra.operations import files

from llmhost.facts.files import FileText
from llmhost.facts.host import GuestStatus
from llmhost.facts.nvidia import DeviceMajors, NvidiaDeviceNodes
from llmhost.guest_boot import GuestKind, boot_set_command, config_path, start_command
from llmhost.lxc_passthrough import passthrough_block, qm_set_commands, with_block
from llmhost.operations.log import say
from llmhost.operations.step import engine_step, refusal


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


def conf_with_block(conf: str, block: str) -> str | None:
    """The guest config with `block`, or None when it already has it."""
    new = with_block(conf + "\n", block)
    return None if new in (conf, conf + "\n") else new


def block_from_live_state(vmid: int) -> None:
    """The block computed now from /proc/devices and /dev/nvidia*, read after this run loaded
    the modules (operations/host.nvidia_modules_loaded), written when it differs; `pct
    reboot` of the guest if it runs."""
    path = f"/etc/pve/lxc/{vmid}.conf"
    majors = host.get_fact(DeviceMajors)
    try:
        block = passthrough_block(majors, host.get_fact(NvidiaDeviceNodes))
    except ValueError as exc:
        raise OperationError(f"after loading the NVIDIA modules, {exc}") from None
    conf = host.get_fact(FileText, path=path)
    if conf is None:
        raise OperationError(f"{path} does not exist: create LXC guest {vmid} first")
    new = conf_with_block(conf, block)
    uvm = majors["nvidia-uvm"]
    if new is None:
        say(f"{path} already shares the GPUs (nvidia-uvm major {uvm})")
        return
    # /etc/pve is pmxcfs: no chmod/chown there, so the file is written without mode or owner.
    if not host.put_file(StringIO(new), path):
        raise OperationError(f"could not write {path}")
    say(f"{path}: GPU passthrough block written (nvidia-uvm major {uvm}, read now)")
    if host.get_fact(GuestStatus, kind="lxc", vmid=vmid) == "running":
        ok, output = host.run_shell_command(StringCommand("pct", "reboot", str(int(vmid))))
        if not ok:
            raise OperationError(f"pct reboot {vmid} failed: {' '.join(output.stderr_lines)}")


@operation()
def lxc_gpu_block(vmid: int, block: str | None):
    """
    The managed passthrough block in /etc/pve/lxc/<vmid>.conf; on a change, `pct reboot` of a
    running guest (a stopped one reads it when it starts).

    + vmid: the LXC guest
    + block: the rendered block (lxc_passthrough.passthrough_block); None where this run
      loads the NVIDIA modules: the block is then computed when the operation runs, from
      /proc/devices and /dev/nvidia* as they are after the load (one step, a change)
    """
    path = f"/etc/pve/lxc/{vmid}.conf"
    conf = host.get_fact(FileText, path=path)
    if conf is None:
        yield refusal(f"{path} does not exist: create LXC guest {vmid} first")
        return
    own = conf.split("\n[", 1)[0]  # the guest's own section, not its snapshots'
    if re.search(r"^unprivileged:\s*1\s*$", own, re.M):
        # The serving unit raises LimitMEMLOCK=infinity and LimitNOFILE=1048576 (pinned memory
        # for NCCL), which an unprivileged container cannot: systemd would fail it (205/LIMITS)
        # after the GPUs were shared in. Refused before anything changes on this guest.
        yield refusal(
            f"LXC guest {vmid} is unprivileged ({path}: 'unprivileged: 1'): its vLLM unit "
            "needs LimitMEMLOCK=infinity, which only a privileged container can raise; "
            "recreate it privileged (unprivileged: 0, docs/sites.md: The first day)"
        )
        return
    if block is None:
        yield engine_step(
            functools.partial(block_from_live_state, vmid),
            shown=("cat /proc/devices", "ls /dev/nvidia*", f"write {path}", f"pct reboot {vmid}"),
        )
        return
    new = conf_with_block(conf, block)
    if new is None:
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
