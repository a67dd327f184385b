"""The managed block of /etc/pve/lxc/<vmid>.conf that shares the host's GPUs into a guest.

Majors come from the DeviceMajors fact (/proc/devices), never from a constant: the nvidia-uvm
major is assigned at module load (238 on the H200 box, 508/511 in public reports).
"""

from __future__ import annotations

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
