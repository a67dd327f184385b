"""Who listens on a TCP port: found before any unit starts, so a foreign server on the
serving port stops the deploy with its name instead of a unit crash-looping against it."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from pyinfra.api import FactBase


@dataclass(frozen=True)
class PortHolder:
    pid: int
    unit: str  # the systemd unit whose cgroup holds it ("" when none)
    command: str

    def describe(self) -> str:
        unit = f", unit {self.unit}" if self.unit else ""
        return f"pid {self.pid} ({self.command}{unit})"


def parse_port_holders(lines: Iterable[str]) -> list[PortHolder]:
    """Lines of `pid<TAB>unit<TAB>command` (the fact's command) into holders."""
    holders = []
    for line in lines:
        pid, _, rest = line.partition("\t")
        unit, _, command = rest.partition("\t")
        if pid.strip().isdigit():
            holders.append(PortHolder(int(pid), unit.strip(), command.strip() or "?"))
    return holders


class PortHolders(FactBase[list[PortHolder]]):
    """Processes listening on TCP `port` (any address), with their unit and command line."""

    @staticmethod
    def default() -> list[PortHolder]:
        return []

    def command(self, port: int) -> str:
        return (
            f"for pid in $(ss -Hltnp 'sport = :{int(port)}' 2>/dev/null "
            "| grep -o 'pid=[0-9]*' | cut -d= -f2 | sort -u); do "
            "unit=$(sed -n 's|^0::.*/||p' /proc/$pid/cgroup 2>/dev/null); "
            "cmd=$(tr '\\0' ' ' < /proc/$pid/cmdline 2>/dev/null | cut -c1-160); "
            'printf "%s\\t%s\\t%s\\n" "$pid" "$unit" "$cmd"; done'
        )

    def process(self, output: Iterable[str]) -> list[PortHolder]:
        return parse_port_holders(output)
