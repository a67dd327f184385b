"""GPU metrics for node exporter's textfile collector, from `nvidia-smi`, on a GPU guest or host.

Why: a site without NVIDIA's DCGM exporter still wants GPU memory, utilisation, temperature and
power in Prometheus, and above all the zombie signal: GPU memory held by something that is not
an llmhost server (vLLM workers outliving their server, vllm#55510). node exporter already
runs on every host; a timer runs this script every few seconds and the collector exposes its
file. It runs with the system python3 (stdlib only) and imports nothing from llmhost; the
control side imports it for its tests.

Who holds memory is decided where it can be: on a Proxmox host or in a VM, nvidia-smi's PIDs
are the machine's own, so each process's cgroup says whether it runs in an llmhost unit (a
guest's units included, seen from the host); inside an LXC guest nvidia-smi lists the host's
PIDs, so memory in use while none of the guest's llmhost units is active counts as held.

    python3 gpu_metrics.py --out /var/lib/prometheus/node-exporter/llmhost_gpu.prom \
        [--attribute processes|units]

The file is written whole and renamed into place, so a scrape never sees half of it. When
nvidia-smi fails, `llmhost_gpu_metrics_up 0` is written and the exit status is 1.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Sequence

GPU_QUERY = "index,uuid,name,memory.used,memory.total,utilization.gpu,temperature.gpu,power.draw"
APPS_QUERY = "gpu_uuid,pid,used_memory"
MIB = 1024 * 1024

HELP = {
    "llmhost_gpu_metrics_up": ("gauge", "1 when nvidia-smi answered on the last run"),
    "llmhost_gpu_metrics_last_run_timestamp_seconds": ("gauge", "when this file was written"),
    "llmhost_gpu_memory_used_bytes": ("gauge", "GPU memory in use (nvidia-smi memory.used)"),
    "llmhost_gpu_memory_total_bytes": ("gauge", "GPU memory (nvidia-smi memory.total)"),
    "llmhost_gpu_utilization_ratio": ("gauge", "GPU utilisation, 0 to 1 (utilization.gpu)"),
    "llmhost_gpu_temperature_celsius": ("gauge", "GPU temperature (temperature.gpu)"),
    "llmhost_gpu_power_watts": ("gauge", "GPU power draw (power.draw)"),
    "llmhost_gpu_compute_processes": (
        "gauge",
        "processes nvidia-smi lists on the GPU (none inside an LXC guest: host PIDs)",
    ),
    "llmhost_serving_units_active": (
        "gauge",
        "llmhost units active on this LXC guest (where memory is attributed by unit)",
    ),
    "llmhost_gpu_memory_held_without_server_bytes": (
        "gauge",
        "GPU memory held by processes outside llmhost's units (in an LXC guest: in use while "
        "none of its llmhost units is active): the zombie signal",
    ),
}


def number(text: str) -> float | None:
    """nvidia-smi's value, or None for "[N/A]", "[Not Supported]" and the like."""
    try:
        return float(text.strip())
    except ValueError:
        return None


def fmt(value: float) -> str:
    """Exact: bytes stay whole numbers (the `g` format would round 8811 MiB to 4 digits)."""
    return str(int(value)) if float(value).is_integer() else repr(value)


def label_value(text: str) -> str:
    return text.strip().replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ")


def in_llmhost_unit(pid: str, proc: str = "/proc") -> bool:
    """The process runs in an llmhost unit's cgroup (a serving unit, or its A/B reference),
    on this machine or in one of its LXC guests (seen from the host as /lxc.payload.N/...)."""
    try:
        with open(f"{proc}/{pid}/cgroup") as handle:
            text = handle.read()
    except OSError:
        return False
    return re.search(r"/llmhost-[^/\n]+\.service(/|$)", text, re.M) is not None


def held_by_processes(apps_csv: str, in_server: Callable[[str], bool]) -> float:
    """Bytes held by GPU processes outside any llmhost unit: where nvidia-smi's PIDs are this
    machine's (a Proxmox host, a KVM guest)."""
    held = 0.0
    for line in apps_csv.splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) >= 3 and fields[1] and not in_server(fields[1]):
            held += (number(fields[2]) or 0.0) * MIB
    return held


def held_by_units(gpu_csv: str, units_active: int) -> float:
    """Bytes in use while no llmhost unit is active: inside an LXC guest, where nvidia-smi
    lists the host's PIDs (or none) and only the guest's own units can be checked."""
    if units_active:
        return 0.0
    used = 0.0
    for line in gpu_csv.splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) >= 4:
            used += (number(fields[3]) or 0.0) * MIB
    return used


def render(
    gpu_csv: str, apps_csv: str, held: float, now: float, units_active: int | None = None
) -> str:
    """The textfile of one run: gpu_csv is `--query-gpu=GPU_QUERY`, apps_csv is
    `--query-compute-apps=APPS_QUERY` (both csv,noheader,nounits); held is the zombie
    signal (held_by_processes or held_by_units)."""
    samples: dict[str, list[str]] = {name: [] for name in HELP}
    apps: dict[str, int] = {}
    for line in apps_csv.splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) >= 2 and fields[0]:
            apps[fields[0]] = apps.get(fields[0], 0) + 1
    for line in gpu_csv.splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) < 8:
            continue
        index, uuid, name, used, total, util, temp, power = fields[:8]
        labels = f'gpu="{label_value(index)}",uuid="{label_value(uuid)}",name="{label_value(name)}"'
        values = {
            "llmhost_gpu_memory_used_bytes": None if number(used) is None else number(used) * MIB,
            "llmhost_gpu_memory_total_bytes": (
                None if number(total) is None else number(total) * MIB
            ),
            "llmhost_gpu_utilization_ratio": None if number(util) is None else number(util) / 100,
            "llmhost_gpu_temperature_celsius": number(temp),
            "llmhost_gpu_power_watts": number(power),
            "llmhost_gpu_compute_processes": float(apps.get(uuid, 0)),
        }
        for metric, value in values.items():
            if value is not None:
                samples[metric].append(f"{metric}{{{labels}}} {fmt(value)}")
    samples["llmhost_gpu_metrics_up"].append("llmhost_gpu_metrics_up 1")
    samples["llmhost_gpu_metrics_last_run_timestamp_seconds"].append(
        f"llmhost_gpu_metrics_last_run_timestamp_seconds {now:.3f}"
    )
    if units_active is not None:
        samples["llmhost_serving_units_active"].append(
            f"llmhost_serving_units_active {units_active}"
        )
    samples["llmhost_gpu_memory_held_without_server_bytes"].append(
        f"llmhost_gpu_memory_held_without_server_bytes {fmt(held)}"
    )
    return text_of(samples)


def text_of(samples: dict[str, list[str]]) -> str:
    out: list[str] = []
    for metric, lines in samples.items():
        if not lines:
            continue
        kind, help_text = HELP[metric]
        out += [f"# HELP {metric} {help_text}", f"# TYPE {metric} {kind}", *lines]
    return "\n".join(out) + "\n"


def failed(now: float) -> str:
    return text_of(
        {
            "llmhost_gpu_metrics_up": ["llmhost_gpu_metrics_up 0"],
            "llmhost_gpu_metrics_last_run_timestamp_seconds": [
                f"llmhost_gpu_metrics_last_run_timestamp_seconds {now:.3f}"
            ],
        }
    )


def run(argv: Sequence[str]) -> str:
    return subprocess.run(argv, capture_output=True, text=True, timeout=30, check=True).stdout


def active_llmhost_units() -> int:
    """Active llmhost-*.service units (a serving unit or its A/B reference); 0 where there is
    no systemd."""
    try:
        out = subprocess.run(
            ["systemctl", "list-units", "--state=active", "--plain", "--no-legend"]
            + ["llmhost-*.service"],
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return 0
    return len([line for line in out.splitlines() if line.strip()])


def write_atomically(path: str, text: str) -> None:
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as handle:
        handle.write(text)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--nvidia-smi", default="nvidia-smi")
    parser.add_argument(
        "--attribute",
        choices=["processes", "units"],
        default="processes",
        help="who holds GPU memory: by each process's cgroup (nvidia-smi's PIDs are this "
        "machine's: a host, a VM) or by this machine's llmhost units (an LXC guest)",
    )
    args = parser.parse_args(argv)
    now = time.time()
    fmt = "--format=csv,noheader,nounits"
    try:
        gpus = run([args.nvidia_smi, f"--query-gpu={GPU_QUERY}", fmt])
        apps = run([args.nvidia_smi, f"--query-compute-apps={APPS_QUERY}", fmt])
    except (OSError, subprocess.SubprocessError) as exc:
        write_atomically(args.out, failed(now))
        print(f"gpu_metrics: nvidia-smi failed: {exc}", file=sys.stderr)
        return 1
    if args.attribute == "processes":
        text = render(gpus, apps, held_by_processes(apps, in_llmhost_unit), now)
    else:
        units = active_llmhost_units()
        text = render(gpus, apps, held_by_units(gpus, units), now, units_active=units)
    write_atomically(args.out, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
