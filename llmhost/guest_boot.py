"""Every managed guest back after a Proxmox host reboots: `onboot`/`startup` in its config, and
a guest found stopped started.

Why: a host that reboots (a kernel command line change, a power cut) brings back only guests
marked `onboot: 1`; the serving guests are what the host is for. Proxmox starts them in
`startup: order=N` order. The commands are Proxmox's own (`pct set/start`, `qm set/start`);
this module only decides them from what the guest's config file and `pct status` say.
"""

from __future__ import annotations

from typing import Literal

GuestKind = Literal["lxc", "kvm"]
TOOLS: dict[str, str] = {"lxc": "pct", "kvm": "qm"}
CONFIG_PATHS: dict[str, str] = {
    "lxc": "/etc/pve/lxc/{vmid}.conf",
    "kvm": "/etc/pve/qemu-server/{vmid}.conf",
}


def config_path(kind: GuestKind, vmid: int) -> str:
    return CONFIG_PATHS[kind].format(vmid=vmid)


def current_settings(config_text: str) -> dict[str, str]:
    """The guest's own keys: the lines before its first snapshot section (`[name]`)."""
    settings: dict[str, str] = {}
    for line in config_text.splitlines():
        if line.startswith("["):
            break
        key, sep, value = line.partition(":")
        if sep and not line.startswith("#"):
            settings[key.strip()] = value.strip()
    return settings


def wanted_settings(order: int) -> dict[str, str]:
    return {"onboot": "1", "startup": f"order={order}"}


def boot_set_command(kind: GuestKind, vmid: int, config_text: str, order: int) -> str | None:
    """`pct|qm set <vmid> --onboot 1 --startup order=N` for the keys that differ, else None."""
    current = current_settings(config_text)
    differ = {k: v for k, v in wanted_settings(order).items() if current.get(k) != v}
    if not differ:
        return None
    flags = " ".join(f"--{key} {value}" for key, value in differ.items())
    return f"{TOOLS[kind]} set {vmid} {flags}"


def parse_status(output: str) -> str | None:
    """`pct status`/`qm status` print `status: running` (or stopped, ...); None otherwise."""
    for line in output.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() == "status":
            return value.strip() or None
    return None


def start_command(kind: GuestKind, vmid: int, status: str | None) -> str | None:
    """`pct|qm start <vmid>` for a stopped guest; None for a running one."""
    return f"{TOOLS[kind]} start {vmid}" if status == "stopped" else None
