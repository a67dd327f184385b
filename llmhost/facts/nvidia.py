"""Facts about the host's NVIDIA plumbing, parsed from real captures (tests/fixtures/h200)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

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

    def command(self) -> str:
        # The module's own file; where /proc/driver is hidden, NVML's view of the same module,
        # asked only while /proc/devices lists the nvidia major: as root on a box whose module
        # is not loaded, NVML runs the setuid nvidia-modprobe, which loads it (a fact, read at
        # prepare time and under --dry, must change nothing). Not listed: not loaded, None.
        return (
            "cat /proc/driver/nvidia/version 2>/dev/null || "
            "{ awk '$2 == \"nvidia\" { f = 1 } END { exit !f }' /proc/devices 2>/dev/null && "
            "nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null "
            "| head -n 1; } || true"
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

    def command(self) -> str:
        return (
            "ls -1 /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.* /usr/lib64/libnvidia-ml.so.* "
            "2>/dev/null || true"
        )

    def process(self, output: Iterable[str]) -> str | None:
        return parse_userspace_version(output)


@dataclass(frozen=True)
class NvidiaModule:
    """What the running kernel has of NVIDIA's driver, loaded or not:
    - kernel: `uname -r` (a module is built per kernel: DKMS with the kernel's pve-headers);
    - version: `modinfo -F version nvidia`, the module `modprobe nvidia` would load for that
      kernel; None when none is installed for it;
    - gpu_minors: each GPU's "Device Minor" in /proc/driver/nvidia/gpus/*/information, the
      minor of its /dev/nvidia<N> (only while the module is loaded);
    - nvidia_modprobe: NVIDIA's nvidia-modprobe is on PATH (it creates the /dev/nvidia* nodes).
    """

    kernel: str = ""
    version: str | None = None
    gpu_minors: tuple[int, ...] = ()
    nvidia_modprobe: bool = False


def parse_nvidia_module(lines: Iterable[str]) -> NvidiaModule:
    kernel, version, minors, tool = "", None, [], False
    for line in lines:
        key, _, value = line.strip().partition(" ")
        value = value.strip()
        if key == "kernel":
            kernel = value
        elif key == "module" and re.fullmatch(r"\d+\.\d+(?:\.\d+)?", value):
            version = value
        elif key == "minor" and value.isdigit():
            minors.append(int(value))
        elif key == "nvidia-modprobe":
            tool = True
    return NvidiaModule(kernel, version, tuple(sorted(set(minors))), tool)


class NvidiaKernelModule(FactBase[NvidiaModule]):
    """The NVIDIA module installed for the running kernel, its GPUs' minors, nvidia-modprobe:
    what a host whose modules are not loaded yet needs to load them (operations/host.py)."""

    @staticmethod
    def default() -> NvidiaModule:
        return NvidiaModule()

    def command(self) -> str:
        return (
            'echo "kernel $(uname -r)"; '
            'v=$(modinfo -F version nvidia 2>/dev/null) && [ -n "$v" ] && echo "module $v"; '
            "command -v nvidia-modprobe >/dev/null 2>&1 && echo nvidia-modprobe; "
            "for f in /proc/driver/nvidia/gpus/*/information; do "
            '[ -f "$f" ] && awk \'/^Device Minor:/ { print "minor", $3 }\' "$f"; done; true'
        )

    def process(self, output: Iterable[str]) -> NvidiaModule:
        return parse_nvidia_module(output)
