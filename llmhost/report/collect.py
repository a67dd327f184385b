"""Gather one host's facts into its state document, and write the documents.

Runs while pyinfra prepares deploys/report.py: facts only, no operation, so the report
changes nothing on any host. Each host's Markdown and JSON are written as soon as its facts
are in; the site summary when the last active host is done.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pyinfra import host
from pyinfra.context import state
from pyinfra.facts.files import Sha256File

from llmhost.config.guest import GuestConfig
from llmhost.config.loading import ConfigError, load_guest, load_monitoring, load_proxmox_host
from llmhost.config.proxmox_host import ProxmoxHostConfig
from llmhost.facts.files import FileText
from llmhost.facts.host import ActiveSwaps, BootLoader, Container, FstabSwaps, RunningCmdline
from llmhost.facts.nvidia import HostDriverVersion
from llmhost.groups import is_monitoring_host, is_proxmox_host, is_serving_guest
from llmhost.host_plan import GRUB_DEFAULT, SYSCTL_FILE, SYSTEMD_BOOT_CMDLINE, plan
from llmhost.kernel_cmdline import grub_params
from llmhost.naming import serving_record, unit_name
from llmhost.render import render_env, unit_env, unit_paths
from llmhost.report import facts as rf
from llmhost.report import sections as sec
from llmhost.report.markdown import host_md, site_md
from llmhost.report.running import prometheus_query, running
from llmhost.secrets import resolve_secrets
from llmhost.switch.plan import ServingRecord

STAMP = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")  # one per pyinfra run (module import)
_done: list[dict[str, Any]] = []


def reports_dir() -> Path:
    return Path.cwd() / "reports" / STAMP


def common_sections(venv: str | None, cuda_home: str | None = None) -> list[sec.Section]:
    """Hardware and software, for every kind of host (a guest adds its venv and CUDA)."""
    gpu_csv = host.get_fact(rf.GpuInventory)
    gpus = sec.parse_gpu_inventory(gpu_csv)
    driver = host.get_fact(HostDriverVersion) or (gpus[0]["driver"] if gpus else None)
    versions = host.get_fact(rf.VenvVersions, python=f"{venv}/bin/python") if venv else {}
    nvcc = host.get_fact(rf.NvccVersion, cuda_home=cuda_home) if cuda_home else ""
    return [
        sec.hardware(
            gpu_csv,
            host.get_fact(rf.GpuTopology),
            host.get_fact(rf.Lscpu),
            host.get_fact(rf.MemInfo),
        ),
        sec.software(host.get_fact(rf.KernelRelease), driver, nvcc, venv, versions),
    ]


def proxmox_sections(cfg: ProxmoxHostConfig) -> list[sec.Section]:
    p = plan(cfg)
    loader = cfg.boot_loader if cfg.boot_loader != "auto" else host.get_fact(BootLoader)
    next_boot = None
    if loader == "systemd-boot":
        next_boot = (host.get_fact(FileText, path=SYSTEMD_BOOT_CMDLINE) or "").split()
    elif loader == "grub":
        next_boot = grub_params(host.get_fact(FileText, path=GRUB_DEFAULT) or "") or []
    return [
        *common_sections(None),
        sec.kernel_tuning(
            managed=True,
            running_cmdline=host.get_fact(RunningCmdline),
            wanted_params=p.kernel_params,
            absent_params=p.kernel_params_absent,
            next_boot=next_boot,
            sysctls_wanted=p.sysctls,
            sysctl_file=host.get_fact(FileText, path=SYSCTL_FILE),
            sysctl_live=host.get_fact(rf.SysctlLive, keys=tuple(sorted(p.sysctls))),
            in_container=host.get_fact(Container) != "none",
            swaps_active=host.get_fact(ActiveSwaps),
            swaps_fstab=host.get_fact(FstabSwaps),
            modules_wanted=p.modules,
            modules_loaded=host.get_fact(rf.LoadedModules),
        ),
        sec.reasoned("Ruled out", cfg.ruled_out),
        sec.reasoned("Constraints", cfg.constraints),
    ]


def masked(env: dict[str, str]) -> dict[str, str]:
    return {k: (rf.MASK if k in rf.SECRET_KEYS else v) for k, v in env.items()}


def guest_sections(cfg: GuestConfig) -> list[sec.Section]:
    try:
        secrets = resolve_secrets(cfg)
    except ConfigError:
        secrets = None  # not on this control machine: the secrets' drift is not checked
    cuda_home = f"/usr/local/cuda-{cfg.cuda.toolkit_version}" if cfg.cuda else None
    sections = common_sections(cfg.venv_dir, cuda_home)
    sections.append(
        sec.kernel_tuning(
            managed=False,
            running_cmdline=host.get_fact(RunningCmdline),
            wanted_params=[],
            absent_params=[],
            next_boot=None,
            sysctls_wanted={},
            sysctl_file=None,
            sysctl_live={},
            in_container=True,
            swaps_active=host.get_fact(ActiveSwaps),
            swaps_fstab=[],
            modules_wanted=[],
            modules_loaded=[],
        )
    )
    record = ServingRecord.parse(host.get_fact(FileText, path=serving_record(cfg.root_dir)))
    for model, _ in cfg.units_and_ports():
        paths = unit_paths(cfg, model)
        main = model == cfg.served_model
        actual = host.get_fact(rf.MaskedEnvFile, path=paths.env_file)
        wanted = masked(unit_env(cfg, model, secrets))
        same_file = True
        if secrets is not None and actual is not None:
            text = render_env(cfg, model, secrets)
            same_file = (
                host.get_fact(Sha256File, path=paths.env_file)
                == hashlib.sha256(text.encode()).hexdigest()
            )
        sections.append(
            sec.served_model(
                model=model,
                unit=unit_name(model),
                show=host.get_fact(rf.UnitShow, unit=unit_name(model)),
                env_wanted=wanted,
                env_actual=actual,
                secrets_match=same_file or actual != wanted,
                description=cfg.profile_for(model).description,
                previous=record.describe_previous() if main else "not switched (extra unit)",
                recorded=(record.current or "none") if main else None,
            )
        )
        results = Path(cfg.verify.results_dir) / host.name
        sections.append(sec.benchmarks(results, model))
        prometheus = site_prometheus()
        if prometheus:
            gate = sec.last_gate(results, model)
            sections.append(
                running(
                    prometheus_query(prometheus),
                    prometheus,
                    host.name,
                    str(cfg.profile_for(model).served_name),
                    unit_name(model),
                    gate[1] if gate else None,
                )
            )
    has_gpu = bool(sec.parse_gpu_inventory(host.get_fact(rf.GpuInventory)))
    sections.append(sec.gpu_holders(host.get_fact(rf.GpuComputeApps), has_gpu))
    sections.append(sec.reasoned("Ruled out", cfg.ruled_out))
    sections.append(sec.reasoned("Constraints", cfg.constraints))
    return sections


def site_prometheus() -> str | None:
    """The site's Prometheus, when the inventory has a monitoring host."""
    for other in state.inventory:
        if is_monitoring_host(other):
            s = load_monitoring(other).monitoring
            return f"http://{s.listen_address}:{s.port}"
    return None


def safe_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)


def write_host(role: str, sections: list[sec.Section]) -> dict[str, Any]:
    out = reports_dir()
    out.mkdir(parents=True, exist_ok=True)
    name = safe_name(host.name)
    for s in sections:  # plots travel with the report, so it reads anywhere
        copied = []
        for plot in s.pop("plots", []):
            target = out / f"{name}-{Path(plot).name}"
            shutil.copyfile(plot, target)
            copied.append(target.name)
        if copied:
            s["plots_in_report"] = copied
    doc = {
        "host": host.name,
        "role": role,
        "generated": STAMP,
        "drift": sec.drift_of(sections),
        "sections": sections,
    }
    (out / f"{name}.json").write_text(json.dumps(doc, indent=2, default=str) + "\n")
    (out / f"{name}.md").write_text(host_md(doc))
    return doc


def report_host() -> None:
    """This host's document; the site's summary once every active host has one."""
    if is_proxmox_host(host):
        cfg = load_proxmox_host(host)
        doc = write_host("Proxmox host", proxmox_sections(cfg))
        summary = (
            f"{cfg.host_profile}, {len(cfg.lxc_guests)} LXC / {len(cfg.kvm_guests)} KVM guests"
        )
    elif is_serving_guest(host):
        guest = load_guest(host)
        doc = write_host("serving guest", guest_sections(guest))
        summary = f"serves {', '.join(m for m, _ in guest.units_and_ports())}"
    else:
        doc = write_host("other", common_sections(None))
        summary = "not managed by llmhost"
    _done.append(
        {
            "host": host.name,
            "role": doc["role"],
            "summary": summary,
            "drift": len(doc["drift"]),
            "file": f"{safe_name(host.name)}.md",
        }
    )
    if len(_done) == state.inventory.len_active_hosts():
        write_site()


def write_site() -> None:
    site = {
        "inventory": next(
            (a for a in sys.argv[1:] if a.endswith(".py") and "deploys/" not in a), "inventory"
        ),
        "generated": STAMP,
        "hosts": sorted(_done, key=lambda h: (h["role"], h["host"])),
    }
    out = reports_dir()
    (out / "site.json").write_text(json.dumps(site, indent=2) + "\n")
    (out / "site.md").write_text(site_md(site))
    print(f"--> state documents written to {out.relative_to(Path.cwd())}/", flush=True)
