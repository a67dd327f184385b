"""Facts about the host's NVIDIA plumbing, parsed from real captures (tests/fixtures/h200)."""

from __future__ import annotations

import re
from collections.abc import Iterable

from pyinfra.api import FactBase

NVIDIA_DEVICE_NAMES = ("nvidia", "nvidia-uvm", "nvidia-caps")


def parse_proc_devices(lines: Iterable[str]) -> dict[str, int]:
    """Character-device majors from /proc/devices: the nvidia-uvm one is dynamic, never fixed."""
    majors: dict[str, int] = {}
    in_char = False
    for line in lines:
        if line.startswith("Character devices"):
            in_char = True
            continue
        if line.startswith("Block devices"):
            in_char = False
        m = re.match(r"^\s*(\d+)\s+(\S+)\s*$", line)
        if in_char and m:
            majors.setdefault(m.group(2), int(m.group(1)))
    return majors


class DeviceMajors(FactBase[dict[str, int]]):
    """{name: major} of character devices (e.g. nvidia 195, nvidia-uvm 238 on the H200 box)."""

    @staticmethod
    def default() -> dict[str, int]:
        return {}

    def command(self) -> str:
        return "cat /proc/devices"

    def process(self, output: Iterable[str]) -> dict[str, int]:
        return parse_proc_devices(output)


class NvidiaDeviceNodes(FactBase[list[str]]):
    """/dev/nvidia* nodes present (files, not the nvidia-caps directory)."""

    @staticmethod
    def default() -> list[str]:
        return []

    def command(self) -> str:
        return "find /dev -maxdepth 2 -name 'nvidia*' -type c 2>/dev/null | sort || true"

    def process(self, output: Iterable[str]) -> list[str]:
        return [line.strip() for line in output if line.strip()]


def parse_driver_version(text: str) -> str | None:
    """/proc/driver/nvidia/version (or nvidia-smi's driver_version line) -> '580.159.04'."""
    m = re.search(r"Kernel Module(?: for \S+)?\s+(\d+\.\d+(?:\.\d+)?)", text)
    if m:
        return m.group(1)
    m = re.fullmatch(r"\s*(\d+\.\d+(?:\.\d+)?)\s*", text)
    return m.group(1) if m else None


class HostDriverVersion(FactBase[str | None]):
    """The loaded kernel module's version; inside an LXC guest, the host's module."""

    @staticmethod
    def default() -> None:
        return None

    def command(self, nonce: str = "") -> str:
        # The module's own file; where /proc/driver is hidden, NVML's view of the same module.
        return (
            "cat /proc/driver/nvidia/version 2>/dev/null || "
            "nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null "
            "| head -n 1 || true"
        )

    def process(self, output: Iterable[str]) -> str | None:
        return parse_driver_version("\n".join(output))


def parse_userspace_version(lines: Iterable[str]) -> str | None:
    """`ls` of libnvidia-ml.so.* -> '590.48.01' (the userspace driver a guest has)."""
    for line in lines:
        m = re.search(r"libnvidia-ml\.so\.(\d+\.\d+(?:\.\d+)?)$", line.strip())
        if m:
            return m.group(1)
    return None


class UserspaceDriverVersion(FactBase[str | None]):
    """Version of the NVIDIA userspace libraries installed in a guest, None if absent."""

    @staticmethod
    def default() -> None:
        return None

    def command(self, nonce: str = "") -> str:
        return (
            "ls -1 /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.* /usr/lib64/libnvidia-ml.so.* "
            "2>/dev/null || true"
        )

    def process(self, output: Iterable[str]) -> str | None:
        return parse_userspace_version(output)
