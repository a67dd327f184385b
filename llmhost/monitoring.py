"""What the site's Prometheus scrapes and the files it runs on, from the inventory and
group_data: pure, so the exact files are tested without a Prometheus.

Why from the inventory: a replica added to `lxc_guests` is scraped by the next converge, and
one removed stops being scraped; nobody keeps a second list by hand. Targets are the address
pyinfra reaches each host on (`ssh_hostname`, else its name): the site's own names.
"""

from __future__ import annotations

import functools
import ipaddress
import shlex
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from llmhost.config.monitoring import MetricsSettings, MonitoringSettings
from llmhost.render import render_template

PROMETHEUS_CONFIG = "/etc/prometheus/prometheus.yml"
RULES_FILE = "/etc/prometheus/llmhost-rules.yml"
ALERTMANAGER_CONFIG = "/etc/prometheus/alertmanager.yml"
# It may hold the webhook URL: readable by Debian's prometheus-alertmanager (User=prometheus)
# and root only.
ALERTMANAGER_CONFIG_MODE = ("640", "root", "prometheus")
PROMETHEUS_DEFAULTS = "/etc/default/prometheus"
ALERTMANAGER_DEFAULTS = "/etc/default/prometheus-alertmanager"
NODE_EXPORTER_DEFAULTS = "/etc/default/prometheus-node-exporter"
TEXTFILE_DIR = "/var/lib/prometheus/node-exporter"
GPU_TEXTFILE = f"{TEXTFILE_DIR}/llmhost_gpu.prom"
GATE_TEXTFILE_PATTERN = "llmhost_gate*.prom"  # one file a gated model (and the old single one)
GPU_METRICS_UNIT = "prometheus-llmhost-gpu"  # beside Debian's prometheus-node-exporter-*.timer
PROMETHEUS_PACKAGES = ["prometheus", "prometheus-alertmanager"]
NODE_EXPORTER_PACKAGE = "prometheus-node-exporter"


def host_port(address: str, port: int) -> str:
    """address:port, with an IPv6 address in brackets."""
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


@dataclass(frozen=True)
class Target:
    name: str  # the inventory name
    address: str  # host:port Prometheus scrapes
    role: str = ""


@dataclass(frozen=True)
class SiteHost:
    """What the monitoring host needs to know of one inventory host."""

    name: str
    address: str  # ssh_hostname, else the name
    role: str  # "proxmox_host", "serving_guest", "monitoring"
    metrics_port: int
    vllm_ports: tuple[int, ...] = ()  # serving guests: the served model's, then extra units
    router_metrics_port: int | None = None  # router hosts only (vllm-router's own exporter)
    router_address: str | None = None  # where the router's exporter listens
    dcgm_port: int | None = None  # NVIDIA's DCGM exporter, where the site runs one


@dataclass(frozen=True)
class Targets:
    vllm: list[Target]
    node: list[Target]
    router: list[Target]
    dcgm: list[Target]

    def describe(self) -> str:
        text = f"{len(self.vllm)} vLLM and {len(self.node)} node targets"
        text += f", {len(self.router)} router" if self.router else ""
        return text + (f", {len(self.dcgm)} DCGM" if self.dcgm else "")


def scrape_targets(hosts: Iterable[SiteHost]) -> Targets:
    """vLLM, node exporter and router targets, each host once, in inventory order."""
    targets = Targets([], [], [], [])
    seen: set[str] = set()
    for h in hosts:
        for port in h.vllm_ports:
            targets.vllm.append(Target(h.name, host_port(h.address, port), h.role))
        if h.router_metrics_port is not None:
            where = host_port(h.router_address or h.address, h.router_metrics_port)
            targets.router.append(Target(h.name, where, "router"))
        if h.dcgm_port is not None and h.name not in seen:
            targets.dcgm.append(Target(h.name, host_port(h.address, h.dcgm_port), h.role))
        if h.name not in seen:
            targets.node.append(Target(h.name, host_port(h.address, h.metrics_port), h.role))
            seen.add(h.name)
    return targets


def exporter_listen(metrics: MetricsSettings, address: str) -> str:
    """node exporter's --web.listen-address: the given address, else the scrape address when
    it is an IP, else every interface (a host name may resolve to several)."""
    if metrics.listen_address:
        return host_port(metrics.listen_address, metrics.port)
    try:
        ipaddress.ip_address(address)
    except ValueError:
        return f":{metrics.port}"
    return host_port(address, metrics.port)


def render_prometheus_config(s: MonitoringSettings, host_name: str, targets: Targets) -> str:
    return render_template(
        "prometheus.yml.j2",
        s=s,
        host_name=host_name,
        rules_file=RULES_FILE,
        alertmanager=host_port(s.listen_address, s.alertmanager_port),
        itself=host_port(s.listen_address, s.port),
        vllm=targets.vllm,
        node=targets.node,
        router=targets.router,
        dcgm=targets.dcgm,
    )


def render_rules(s: MonitoringSettings, gpu_interval_s: int) -> str:
    return render_template("llmhost-rules.yml.j2", a=s.alerts, gpu_interval_s=gpu_interval_s)


def render_alertmanager_config(s: MonitoringSettings) -> str:
    """Alertmanager's route and receiver; the webhook URL, a secret, only in the file."""
    webhook = s.webhook_url.get_secret_value() if s.webhook_url else None
    return render_template("alertmanager.yml.j2", webhook_url=webhook)


def defaults_file(args: list[str]) -> str:
    """Debian's /etc/default/<service>: the unit passes $ARGS to the daemon."""
    return (
        "# Written by llmhost (llmhost/monitoring.py): the next converge replaces any edit.\n"
        f'ARGS="{" ".join(args)}"\n'
    )


def prometheus_args(s: MonitoringSettings) -> list[str]:
    return [
        f"--web.listen-address={host_port(s.listen_address, s.port)}",
        f"--storage.tsdb.retention.time={s.retention_time}",
        f"--storage.tsdb.retention.size={s.retention_size}",
    ]


def alertmanager_args(s: MonitoringSettings) -> list[str]:
    return [
        f"--web.listen-address={host_port(s.listen_address, s.alertmanager_port)}",
        # A single Alertmanager: no cluster gossip on every interface.
        "--cluster.listen-address=",
    ]


def node_exporter_args(listen: str) -> list[str]:
    return [
        f"--web.listen-address={listen}",
        f"--collector.textfile.directory={TEXTFILE_DIR}",
        "--collector.systemd",
        "--collector.systemd.unit-include=llmhost-.+\\.service",
        # node_systemd_service_restart_total (LlmhostUnitRestarting) is off without it.
        "--collector.systemd.enable-restarts-metrics",
    ]


def gpu_metrics_units(script: str, interval_s: int, attribute: str) -> tuple[str, str]:
    """(service, timer) that run gpu_metrics.py every interval_s seconds; attribute is how it
    tells who holds memory ("processes" on a host or VM, "units" in an LXC guest)."""
    service = (
        "[Unit]\nDescription=llmhost: GPU metrics for node exporter's textfile collector\n\n"
        "[Service]\nType=oneshot\n"
        f"ExecStart=/usr/bin/python3 {script} --out {GPU_TEXTFILE} --attribute {attribute}\n"
    )
    timer = (
        "[Unit]\nDescription=llmhost: GPU metrics every few seconds\n\n"
        f"[Timer]\nOnBootSec=5s\nOnUnitActiveSec={interval_s}s\nAccuracySec=1s\n\n"
        "[Install]\nWantedBy=timers.target\n"
    )
    return service, timer


def gate_textfile(model: str) -> str:
    """Where a guest exports one model's gate record to node exporter's textfile."""
    return f"{TEXTFILE_DIR}/llmhost_gate_{model}.prom"


def gate_text(model: str, when: int, max_age_s: int) -> str:
    """A model's last passing gate (epoch seconds; 0: never passed) and its verify.max_age_s:
    the GateStale alert compares the two figures, so a model never gated fires it too."""
    return (
        "# HELP llmhost_gate_last_pass_timestamp_seconds the last passing throughput gate "
        "(0: none)\n"
        "# TYPE llmhost_gate_last_pass_timestamp_seconds gauge\n"
        f'llmhost_gate_last_pass_timestamp_seconds{{model="{model}"}} {when}\n'
        "# HELP llmhost_gate_max_age_seconds verify.max_age_s: a gate older than this is stale\n"
        "# TYPE llmhost_gate_max_age_seconds gauge\n"
        f'llmhost_gate_max_age_seconds{{model="{model}"}} {max_age_s}\n'
    )


def gate_pass_export(model: str, max_age_s: int, gated: bool) -> Callable[[int], str]:
    """What a pass of the load proofs tells node exporter, given its time: the gate's record
    where the gate runs; nothing where it is off and a draft A/B passed alone (hooks exports
    no record then, so none is left for GateStale to fire on)."""
    if not gated:
        return lambda when: "true"
    return functools.partial(gate_textfile_command, model, max_age_s=max_age_s)


def gate_textfile_command(model: str, when: int, max_age_s: int) -> str:
    """Shell that writes gate_text atomically where node exporter runs (its textfile
    directory exists); nothing elsewhere."""
    q = shlex.quote
    path = gate_textfile(model)
    tmp = f"{path}.tmp"
    text = gate_text(model, when, max_age_s)
    return (
        f"if [ -d {TEXTFILE_DIR} ]; then printf '%s' {q(text)} > {q(tmp)} && "
        f"chmod 644 {q(tmp)} && mv {q(tmp)} {q(path)}; fi"
    )
