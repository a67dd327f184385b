"""The site seen running: node exporter on every Proxmox host and serving guest (GPU metrics
where there are GPUs), Prometheus and Alertmanager on the `monitoring` host.

Every file a package's service reads is written before the package is installed: dpkg keeps
an existing conffile (pyinfra installs with --force-confold), so the first start already
listens where the site says, never on every interface for a moment. Prometheus's config and
rules are checked with `promtool check config` before a reload: a bad rule never replaces
running ones.
"""

from __future__ import annotations

import ipaddress
from importlib.resources import files as package_files
from typing import Any

from pyinfra.api import deploy
from pyinfra.api.operation import OperationMeta
from pyinfra.operations import apt, server, systemd
from pyinfra.operations.util import any_changed

from llmhost.config.guest import GuestConfig
from llmhost.config.loading import load_exporter, load_guest, load_router
from llmhost.config.monitoring import ExporterConfig, MonitoringConfig
from llmhost.config.proxmox_host import ProxmoxHostConfig
from llmhost.config.router import RouterSettings
from llmhost.groups import (
    is_monitoring_host,
    is_proxmox_host,
    is_router_host,
    is_serving_guest,
    scrape_address,
)
from llmhost.monitoring import (
    ALERTMANAGER_CONFIG,
    ALERTMANAGER_CONFIG_MODE,
    ALERTMANAGER_DEFAULTS,
    GPU_METRICS_UNIT,
    NODE_EXPORTER_DEFAULTS,
    NODE_EXPORTER_PACKAGE,
    PROMETHEUS_CONFIG,
    PROMETHEUS_DEFAULTS,
    PROMETHEUS_PACKAGES,
    RULES_FILE,
    SiteHost,
    alertmanager_args,
    defaults_file,
    exporter_listen,
    gpu_metrics_units,
    node_exporter_args,
    prometheus_args,
    render_alertmanager_config,
    render_prometheus_config,
    render_rules,
    scrape_targets,
)
from llmhost.operations.files import atomic_file
from llmhost.tasks.guest_base import apt_proxy

GPU_SCRIPT = "/usr/local/lib/llmhost/gpu_metrics.py"


def router_scrape_address(router: RouterSettings, other: Any) -> str:
    """Its listen address, or the host's own when it listens on every interface."""
    unspecified = ipaddress.ip_address(router.listen_address).is_unspecified
    return scrape_address(other) if unspecified else router.listen_address


def site_hosts(inventory: Any) -> list[SiteHost]:
    """Every Proxmox host, serving guest and monitoring host of the inventory, as the
    monitoring host scrapes it (their data validated here too: a bad port names its host)."""
    hosts: list[SiteHost] = []
    for other in inventory:
        guest = is_serving_guest(other)
        router = load_router(other).router if is_router_host(other) else None
        if not (guest or router or is_proxmox_host(other) or is_monitoring_host(other)):
            continue
        role = "serving_guest" if guest else "proxmox_host" if is_proxmox_host(other) else ""
        metrics = load_exporter(other).metrics
        ports = tuple(port for _, port in load_guest(other).units_and_ports()) if guest else ()
        hosts.append(
            SiteHost(
                name=other.name,
                address=scrape_address(other),
                role=role or ("router" if router else "monitoring"),
                metrics_port=metrics.port,
                vllm_ports=ports,
                router_metrics_port=router.prometheus_port if router else None,
                router_address=router_scrape_address(router, other) if router else None,
                dcgm_port=metrics.dcgm_exporter_port,
            )
        )
    return hosts


def gpu_attribution(proxmox: ProxmoxHostConfig | None, guest: GuestConfig | None) -> str | None:
    """How a host's GPU timer tells who holds memory, or None where it has no NVIDIA GPUs: by
    process on an lxc-p2p Proxmox host (its guests' processes are visible, with their cgroups)
    and in a KVM guest; by unit in an LXC guest (nvidia-smi shows the host's PIDs there)."""
    if proxmox is not None:
        return "processes" if proxmox.host_profile == "lxc-p2p" else None
    if guest is not None and guest.accelerator == "cuda":
        return "units" if guest.host_profile.startswith("lxc") else "processes"
    return None


@deploy("node exporter")
def node_exporter(cfg: ExporterConfig, address: str, gpus: str | None) -> None:
    """node exporter listening where Prometheus scrapes it; the GPU timer where there are
    GPUs (gpus: how it attributes their memory, "processes" or "units"; None: no GPUs)."""
    apt_proxy(cfg.package_sources.apt_proxy)
    listen = exporter_listen(cfg.metrics, address)
    defaults = atomic_file(
        name=f"node exporter listens on {listen}",
        content=defaults_file(node_exporter_args(listen)),
        dest=NODE_EXPORTER_DEFAULTS,
    )
    boot_order([f"{NODE_EXPORTER_PACKAGE}.service"])
    apt.packages(
        name=f"{NODE_EXPORTER_PACKAGE} (Debian)" + (", python3 (GPU metrics)" if gpus else ""),
        packages=[NODE_EXPORTER_PACKAGE] + (["python3"] if gpus else []),
        update=True,
        cache_time=24 * 3600,
        no_recommends=True,
    )
    running(f"{NODE_EXPORTER_PACKAGE}.service", "node exporter")
    systemd.service(
        name="restart node exporter (its arguments changed)",
        service=f"{NODE_EXPORTER_PACKAGE}.service",
        restarted=True,
        _if=defaults.did_change,
    )
    if gpus:
        gpu_metrics_timer(cfg.metrics.gpu_interval_s, gpus)


SERVICE_DROPIN = """\
# Written by llmhost: it binds to the site's address, which must be up first, and it comes
# back whatever stopped it.
[Unit]
After=network-online.target
Wants=network-online.target
StartLimitIntervalSec=0

[Service]
Restart=always
RestartSec=5
"""


def boot_order(services: list[str]) -> OperationMeta:
    """A drop-in per Debian unit: after the network is online, restarted whatever stopped it
    (a listen address not up yet at boot fails the bind). daemon-reload on a change."""
    changed = [
        atomic_file(
            name=f"{service}: after network-online, always restarted",
            content=SERVICE_DROPIN,
            dest=f"/etc/systemd/system/{service}.d/llmhost.conf",
        )
        for service in services
    ]
    return systemd.daemon_reload(name="systemd daemon-reload (drop-ins)", _if=any_changed(*changed))


def running(service: str, what: str) -> None:
    systemd.service(name=f"{what} enabled and running", service=service, running=True, enabled=True)


def gpu_metrics_timer(interval_s: int, attribute: str) -> None:
    script = package_files("llmhost.guest").joinpath("gpu_metrics.py").read_text()
    service, timer = gpu_metrics_units(GPU_SCRIPT, interval_s, attribute)
    changed = [
        atomic_file(name="GPU metrics script", content=script, dest=GPU_SCRIPT),
        atomic_file(
            name=f"{GPU_METRICS_UNIT}.service",
            content=service,
            dest=f"/etc/systemd/system/{GPU_METRICS_UNIT}.service",
        ),
        atomic_file(
            name=f"{GPU_METRICS_UNIT}.timer (every {interval_s} s)",
            content=timer,
            dest=f"/etc/systemd/system/{GPU_METRICS_UNIT}.timer",
        ),
    ]
    systemd.daemon_reload(
        name="systemd daemon-reload (GPU metrics units)", _if=any_changed(*changed)
    )
    running(f"{GPU_METRICS_UNIT}.timer", "GPU metrics timer")
    systemd.service(
        name="restart the GPU metrics timer (its units changed)",
        service=f"{GPU_METRICS_UNIT}.timer",
        restarted=True,
        _if=any_changed(*changed),
    )


@deploy("Prometheus and Alertmanager")
def prometheus(cfg: MonitoringConfig, site: list[SiteHost]) -> None:
    config, prom_args, alertmanager_args_file = monitoring_files(cfg, site)
    boot_order(["prometheus.service", "prometheus-alertmanager.service"])
    apt_proxy(cfg.package_sources.apt_proxy)
    apt.packages(
        name="prometheus, prometheus-alertmanager (Debian)",
        packages=PROMETHEUS_PACKAGES,
        update=True,
        cache_time=24 * 3600,
        no_recommends=True,
    )
    alertmanager = [alertmanager_config(cfg), alertmanager_args_file]
    # A config that fails the check is taken out again: the next run writes and checks it
    # anew (and fails again) instead of finding it "in place"; the running Prometheus keeps
    # the config it loaded last.
    server.shell(
        name="promtool check config (and its rules)",
        commands=[
            f"promtool check config {PROMETHEUS_CONFIG} || "
            f"{{ rm -f {PROMETHEUS_CONFIG} {RULES_FILE}; exit 1; }}"
        ],
        _if=any_changed(*config),
    )
    running("prometheus.service", "Prometheus")
    systemd.service(
        name="restart Prometheus (its arguments changed)",
        service="prometheus.service",
        restarted=True,
        _if=prom_args.did_change,
    )
    # Not right after a restart: a SIGHUP before Prometheus sets its handler ends it.
    systemd.service(
        name="reload Prometheus (config or rules changed)",
        service="prometheus.service",
        reloaded=True,
        _if=lambda: any_changed(*config)() and not prom_args.did_change(),
    )
    running("prometheus-alertmanager.service", "Alertmanager")
    systemd.service(
        name="restart Alertmanager (its config or arguments changed)",
        service="prometheus-alertmanager.service",
        restarted=True,
        _if=any_changed(*alertmanager),
    )


def monitoring_files(
    cfg: MonitoringConfig, site: list[SiteHost]
) -> tuple[list[OperationMeta], OperationMeta, OperationMeta]:
    """Config, rules and arguments, written before the packages that read them: (Prometheus's
    config and rules, its arguments, Alertmanager's arguments)."""
    s = cfg.monitoring
    targets = scrape_targets(site)
    config = [
        atomic_file(
            name=f"Prometheus scrapes {targets.describe()}",
            content=render_prometheus_config(s, cfg.host_name, targets),
            dest=PROMETHEUS_CONFIG,
        ),
        atomic_file(
            name="recording and alert rules",
            content=render_rules(s, cfg.metrics.gpu_interval_s),
            dest=RULES_FILE,
        ),
    ]
    prom_args = atomic_file(
        name=f"Prometheus on {s.listen_address}:{s.port}, retention {s.retention_time} / "
        f"{s.retention_size}",
        content=defaults_file(prometheus_args(s)),
        dest=PROMETHEUS_DEFAULTS,
    )
    alertmanager_args_file = atomic_file(
        name=f"Alertmanager on {s.listen_address}:{s.alertmanager_port}",
        content=defaults_file(alertmanager_args(s)),
        dest=ALERTMANAGER_DEFAULTS,
    )
    return config, prom_args, alertmanager_args_file


def alertmanager_config(cfg: MonitoringConfig) -> OperationMeta:
    """Alertmanager's route and receiver, 0640 root:prometheus (it may hold the webhook URL):
    written after the packages, which create the prometheus group; until then Debian's own
    file routes nothing."""
    mode, user, group = ALERTMANAGER_CONFIG_MODE
    return atomic_file(
        name="Alertmanager route and receiver",
        content=render_alertmanager_config(cfg.monitoring),
        dest=ALERTMANAGER_CONFIG,
        mode=mode,
        user=user,
        group=group,
    )
