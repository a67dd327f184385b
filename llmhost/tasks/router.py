"""vllm-router on a `routers` host: a uv venv synced from its hashed lock, a non-root systemd
unit restarted only when its unit or venv changed, the serving guests as its workers."""

from __future__ import annotations

from typing import Any

from pyinfra.api import deploy
from pyinfra.operations import apt, server, systemd
from pyinfra.operations.util import any_changed

from llmhost.config.guest import GuestConfig
from llmhost.config.loading import ConfigError, load_guest
from llmhost.config.monitoring import ExporterConfig, MonitoringConfig
from llmhost.config.router import RouterConfig
from llmhost.groups import is_serving_guest, scrape_address
from llmhost.locks import load_router_lock
from llmhost.monitoring import host_port
from llmhost.operations.files import atomic_file, service_account
from llmhost.router import (
    ANSWER_TIMEOUT_S,
    UNIT_FILE,
    UNIT_NAME,
    RouterDataError,
    Worker,
    answers_command,
    check_ports,
    choose_workers,
    render_unit,
)
from llmhost.tasks.guest_base import apt_proxy
from llmhost.tasks.uv_vllm import locked_venv


def taken_ports(
    guest: GuestConfig | None, monitor: MonitoringConfig | None, exporter: ExporterConfig | None
) -> dict[int, str]:
    """Ports other llmhost services listen on, on the router's own host."""
    taken: dict[int, str] = {}
    if guest:
        taken |= {port: f"vLLM ({model})" for model, port in guest.units_and_ports()}
    if monitor:
        taken[monitor.monitoring.port] = "Prometheus"
        taken[monitor.monitoring.alertmanager_port] = "Alertmanager"
    if exporter:
        taken[exporter.metrics.port] = "node exporter"
    return taken


def router_workers(cfg: RouterConfig, inventory: Any, taken: dict[int, str]) -> list[Worker]:
    """The workers from the inventory, judged with the ports before any operation."""
    guests = []
    for other in inventory:
        if is_serving_guest(other):
            guest = load_guest(other)
            url = f"http://{host_port(scrape_address(other), guest.port)}"
            guests.append(Worker(other.name, url, guest.served_model))
    try:
        check_ports(cfg.router, taken)
        return choose_workers(cfg.router, guests)
    except RouterDataError as exc:
        raise ConfigError(f"invalid group_data for host {cfg.host_name!r}:\n  {exc}") from None


@deploy("vllm-router")
def vllm_router(cfg: RouterConfig, workers: list[Worker]) -> None:
    s = cfg.router
    lock = load_router_lock(s.version, cfg.host_name)  # no lock: stop before any operation
    apt_proxy(cfg.package_sources.apt_proxy)
    apt.packages(
        name="python3, python3-venv (uv's bootstrap)",
        packages=["python3", "python3-venv"],
        update=True,
        cache_time=24 * 3600,
        no_recommends=True,
    )
    service_account(
        name=f"service user {s.service_user}", user=s.service_user, home="/var/lib/vllm-router"
    )
    venv = locked_venv("router", lock, s.root_dir, s.venv_dir, s.uv_version, cfg.package_sources)
    unit = atomic_file(
        name=f"{UNIT_NAME}: {len(workers)} worker(s), health every {s.health_check_interval_s} s",
        content=render_unit(s, workers),
        dest=UNIT_FILE,
    )
    systemd.daemon_reload(name="systemd daemon-reload (router unit)", _if=unit.did_change)
    running = systemd.service(
        name=f"{UNIT_NAME} enabled and running", service=UNIT_NAME, running=True, enabled=True
    )
    restart = systemd.service(
        name=f"restart {UNIT_NAME} (its unit or venv changed)",
        service=UNIT_NAME,
        restarted=True,
        _if=any_changed(unit, venv),
    )
    server.shell(
        name=f"{UNIT_NAME} answers (after its start, up to {ANSWER_TIMEOUT_S} s)",
        commands=[answers_command(s)],
        _if=any_changed(running, restart),
    )
