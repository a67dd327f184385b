"""Facts about a Proxmox host's boot and kernel state that pyinfra has no fact for."""

from __future__ import annotations

from collections.abc import Iterable

from pyinfra.api import FactBase

from llmhost.guest_boot import TOOLS, parse_status


class BootLoader(FactBase[str | None]):
    """systemd-boot (proxmox-boot-tool manages ESPs and /etc/kernel/cmdline), grub, or None.

    Proxmox uses systemd-boot when booted by UEFI from ZFS: then proxmox-boot-tool lists the
    ESPs in /etc/kernel/proxmox-boot-uuids and /etc/kernel/cmdline is the command line.
    """

    @staticmethod
    def default() -> None:
        return None

    def command(self) -> str:
        return (
            "if [ -s /etc/kernel/proxmox-boot-uuids ] && [ -f /etc/kernel/cmdline ]; then "
            "echo systemd-boot; elif [ -f /etc/default/grub ]; then echo grub; "
            "else echo none; fi"
        )

    def process(self, output: Iterable[str]) -> str | None:
        value = "".join(output).strip()
        return value if value in ("systemd-boot", "grub") else None


class RunningCmdline(FactBase[list[str]]):
    """The parameters this boot used (/proc/cmdline)."""

    @staticmethod
    def default() -> list[str]:
        return []

    def command(self) -> str:
        return "cat /proc/cmdline"

    def process(self, output: Iterable[str]) -> list[str]:
        return " ".join(output).split()


class Container(FactBase[str]):
    """The container technology this system runs in ("lxc", "docker", ...), or "none"."""

    @staticmethod
    def default() -> str:
        return "none"

    def command(self) -> str:
        return "systemd-detect-virt --container || true"

    def process(self, output: Iterable[str]) -> str:
        return "".join(output).strip() or "none"


class ActiveSwaps(FactBase[list[str]]):
    """Swap devices the kernel uses now (/proc/swaps)."""

    @staticmethod
    def default() -> list[str]:
        return []

    def command(self) -> str:
        return "tail -n +2 /proc/swaps 2>/dev/null || true"

    def process(self, output: Iterable[str]) -> list[str]:
        return [line.split()[0] for line in output if line.strip()]


class FstabSwaps(FactBase[list[str]]):
    """Uncommented swap entries in /etc/fstab: each would turn swap back on at boot."""

    @staticmethod
    def default() -> list[str]:
        return []

    def command(self) -> str:
        return "awk '$1 !~ /^#/ && $3 == \"swap\"' /etc/fstab 2>/dev/null || true"

    def process(self, output: Iterable[str]) -> list[str]:
        return [line for line in output if line.strip()]


class GuestStatus(FactBase[str | None]):
    """A Proxmox guest's state from `pct status`/`qm status` ("running", "stopped"), or None
    when the tool cannot tell (no such guest)."""

    @staticmethod
    def default() -> None:
        return None

    def command(self, kind: str, vmid: int) -> str:
        tool = TOOLS[kind]
        return f"{tool} status {int(vmid)} 2>/dev/null || true"

    def process(self, output: Iterable[str]) -> str | None:
        return parse_status("\n".join(output))
