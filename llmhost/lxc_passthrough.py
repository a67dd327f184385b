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
