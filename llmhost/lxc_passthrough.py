"""The managed block of /etc/pve/lxc/<vmid>.conf that shares the host's GPUs into a guest.

Majors come from the DeviceMajors fact (/proc/devices), never from a constant: the nvidia-uvm
major is assigned at module load (238 on the H200 box, 508/511 in public reports). Where the
modules are not loaded yet (a fresh box), plan_module_load says what loads them first.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from llmhost.facts.nvidia import NvidiaModule

BEGIN = "# BEGIN llmhost gpu passthrough"
END = "# END llmhost gpu passthrough"


def passthrough_block(majors: dict[str, int], nodes: list[str]) -> str:
    wanted = [
        ("nvidia", majors.get("nvidia")),
        ("nvidia-uvm", majors.get("nvidia-uvm")),
        ("nvidia-caps", majors.get("nvidia-caps")),
    ]
    missing = [name for name, major in wanted[:2] if major is None]
    if missing:
        raise ValueError(f"/proc/devices lacks {', '.join(missing)}: is the nvidia module loaded?")
    lines = [BEGIN]
    for _name, major in wanted:
        if major is not None:
            lines.append(f"lxc.cgroup2.devices.allow: c {major}:* rwm")
    for node in nodes:
        kind = "dir" if node.endswith("/") else "file"
        lines.append(f"lxc.mount.entry: {node} {node.lstrip('/')} none bind,optional,create={kind}")
    lines.append(END)
    return "\n".join(lines) + "\n"


def with_block(conf: str, block: str) -> str:
    """The guest config with the managed block in its main section (snapshot sections,
    `[name]`, keep their own settings), replacing an older block; other lines untouched."""
    lines = conf.splitlines()
    if BEGIN in lines and END in lines:
        start, end = lines.index(BEGIN), lines.index(END)
        lines = lines[:start] + lines[end + 1 :]
    main_end = next((i for i, line in enumerate(lines) if line.startswith("[")), len(lines))
    head = lines[:main_end]
    while head and not head[-1].strip():
        head.pop()
    tail = lines[main_end:]
    out = head + block.rstrip("\n").splitlines()
    if tail:
        out += [""] + tail
    return "\n".join(out) + "\n"


def hostpci_lines(conf: str) -> dict[int, str]:
    """{index: value} of the main section's hostpciN entries of a qemu-server config."""
    found: dict[int, str] = {}
    for line in conf.splitlines():
        if line.startswith("["):
            break
        key, _, value = line.partition(":")
        if key.startswith("hostpci") and key[7:].isdigit():
            found[int(key[7:])] = value.strip()
    return found


def qm_set_commands(vmid: int, conf: str, addresses: list[str]) -> list[str]:
    """`qm set` for each hostpciN that differs; PCIe passthrough needs q35 (pcie=1)."""
    have = hostpci_lines(conf)
    commands = []
    for index, address in enumerate(addresses):
        want = f"{address},pcie=1"
        if have.get(index) != want:
            commands.append(f"qm set {vmid} --hostpci{index} {want}")
    for index in sorted(i for i in have if i >= len(addresses)):
        commands.append(f"qm set {vmid} --delete hostpci{index}")
    return commands


# Loading the modules the block needs, on a host where they are not loaded yet (a fresh box:
# the modules-load.d file that loads them at boot is written by the same run). The kernel
# module registers its majors in /proc/devices but creates no /dev node: NVIDIA's
# nvidia-modprobe does (what the udev rule of host_plan.render_udev_rule runs at boot), for
# /dev/nvidiactl (minor 255), each GPU's /dev/nvidia<minor>, the nvidia-uvm pair and the MIG
# capability nodes under /dev/nvidia-caps that the H200 box had.
GPU_NODES = (
    "minors=$(cat /proc/driver/nvidia/gpus/*/information 2>/dev/null "
    "| awk '/^Device Minor:/ { print \"-c\" $3 }'); "
    'if [ -z "$minors" ]; then echo "no GPU in /proc/driver/nvidia/gpus with nvidia loaded" >&2; '
    "exit 1; fi; nvidia-modprobe -c255 $minors"
)
UVM_NODES = "nvidia-modprobe -u -c0"
CAP_NODES = (
    "for f in /proc/driver/nvidia/capabilities/mig/config "
    "/proc/driver/nvidia/capabilities/mig/monitor; do "
    'if [ -e "$f" ]; then nvidia-modprobe -f "$f" || exit 1; fi; done'
)


@dataclass(frozen=True)
class ModuleLoad:
    """What a host lacks for the passthrough block (modules, nodes), the commands that load
    and create them, or why this host cannot have them (refusal)."""

    missing: tuple[str, ...] = ()
    commands: tuple[str, ...] = ()
    refusal: str | None = None


def missing_for_passthrough(
    majors: dict[str, int], nodes: list[str], module: NvidiaModule
) -> list[str]:
    """Modules not loaded (their major is not in /proc/devices) and the /dev nodes without
    which a guest has no GPU: /dev/nvidiactl, each GPU's /dev/nvidia<minor>, /dev/nvidia-uvm."""
    missing = [
        f"module {m}"
        for m, dev in (("nvidia", "nvidia"), ("nvidia_uvm", "nvidia-uvm"))
        if dev not in majors
    ]
    wanted = ["/dev/nvidiactl", *(f"/dev/nvidia{m}" for m in module.gpu_minors), "/dev/nvidia-uvm"]
    return missing + [node for node in wanted if node not in nodes]


def plan_module_load(
    majors: dict[str, int], nodes: list[str], module: NvidiaModule, pin: str
) -> ModuleLoad:
    """Nothing when the modules are loaded and their nodes exist; else modprobe of what is not
    loaded and nvidia-modprobe for the nodes; or a refusal naming what to install when no
    module for the running kernel (or another version than the pin) is on disk."""
    missing = tuple(missing_for_passthrough(majors, nodes, module))
    if not missing:
        return ModuleLoad()
    kernel = module.kernel or "the running kernel"
    install = (
        f"install NVIDIA driver {pin} with the pve-headers of kernel {kernel} "
        "(DKMS builds the module for it), then run this deploy again"
    )
    to_load = [
        m for m, dev in (("nvidia", "nvidia"), ("nvidia_uvm", "nvidia-uvm")) if dev not in majors
    ]
    if to_load and module.version is None:
        return ModuleLoad(
            missing,
            refusal=f"no NVIDIA kernel module is installed for kernel {kernel} (modinfo nvidia "
            f"finds none, /proc/devices lists no {to_load[0].replace('_', '-')}): {install}",
        )
    if "nvidia" in to_load and module.version != pin:
        return ModuleLoad(
            missing,
            refusal=f"the NVIDIA kernel module installed for kernel {kernel} is "
            f"{module.version}, group_data pins nvidia_driver_version {pin}: {install}",
        )
    if not module.nvidia_modprobe:
        return ModuleLoad(
            missing,
            refusal="nvidia-modprobe is not installed (NVIDIA's driver installs "
            "/usr/bin/nvidia-modprobe; it creates the /dev/nvidia* nodes, now and from the udev "
            f"rule at boot): reinstall NVIDIA driver {pin}",
        )
    commands = [f"modprobe {m}" for m in to_load] + [GPU_NODES, UVM_NODES, CAP_NODES]
    return ModuleLoad(missing, tuple(commands))
