"""vllm-router's unit and workers from the inventory: the exact flags a router host gets, and
the router data the inventory cannot back, refused (tests/integration/test_router_sandbox.py
runs the unit on the stand-in)."""

from __future__ import annotations

import subprocess

import pytest
from pydantic import ValidationError

from llmhost.config.router import RouterSettings
from llmhost.locks import LockError, load_router_lock
from llmhost.router import (
    RouterDataError,
    Worker,
    answers_command,
    check_ports,
    choose_workers,
    render_unit,
)

GUESTS = [
    Worker("llm-lxc", "http://10.0.0.11:8000", "kimi-k2.5-int4"),
    Worker("llm-vm", "http://10.0.0.12:8000", "kimi-k2.5-int4"),
]


def settings(**override: object) -> RouterSettings:
    return RouterSettings.model_validate({"listen_address": "10.0.0.2", **override})


def test_every_serving_guest_is_a_worker_unless_named() -> None:
    assert choose_workers(settings(), GUESTS) == GUESTS
    assert choose_workers(settings(workers=["llm-vm"]), GUESTS) == GUESTS[1:]


@pytest.mark.parametrize(
    ("data", "guests", "message"),
    [
        ({"workers": ["llm-lxc", "gpu9"]}, GUESTS, "'gpu9' is not a serving guest"),
        ({}, [], "no serving guest to route to"),
        (
            {},
            [*GUESTS, Worker("old", "http://10.0.0.13:8000", "minimax-m2.5")],
            "serve different models",
        ),
    ],
)
def test_workers_the_inventory_cannot_back_are_refused(
    data: dict, guests: list[Worker], message: str
) -> None:
    with pytest.raises(RouterDataError, match=message):
        choose_workers(settings(**data), guests)


def test_a_port_clash_is_refused() -> None:
    with pytest.raises(RouterDataError, match="router.prometheus_port: 8080 is also router.port"):
        check_ports(settings(prometheus_port=8080), {})
    with pytest.raises(RouterDataError, match="router.port: 9090 is taken by Prometheus"):
        check_ports(settings(port=9090), {9090: "Prometheus"})
    check_ports(settings(), {9090: "Prometheus", 9100: "node exporter"})


def test_the_unit_runs_non_root_always_restarts_and_states_every_health_flag() -> None:
    """Every health, retry and circuit-breaker flag, stated: 3 retries are 4 attempts in the
    router's count (tests/unit/test_router_retries.py runs these flags against failing workers)."""
    unit = render_unit(settings(), GUESTS)
    assert "User=vllm-router" in unit and "Restart=always" in unit
    for flag in (
        "--worker-urls http://10.0.0.11:8000 http://10.0.0.12:8000",
        "--health-check-interval-secs 5",
        "--health-failure-threshold 2",
        "--health-check-timeout-secs 5",
        "--retry-max-retries 4",
        "--retry-initial-backoff-ms 50",
        "--retry-max-backoff-ms 1000",
        "--retry-backoff-multiplier 1.5",
        "--retry-jitter-factor 0.2",
        "--cb-failure-threshold 3",
        "--cb-success-threshold 3",
        "--cb-timeout-duration-secs 60",
        "--cb-window-duration-secs 120",
        "--prometheus-host 10.0.0.2",
        "--prometheus-port 29000",
        "--host 10.0.0.2",
        "--port 8080",
    ):
        assert flag in " ".join(unit.replace("\\\n", " ").split()), flag
    assert "--api-key" not in unit  # the workers check the key: none in the router's argv


def test_retries_a_dead_worker_could_use_up_are_refused() -> None:
    """The router's retry may choose the failed worker again; its circuit opens after
    cb_failure_threshold failures, so fewer retries than that can all land on a dead worker."""
    with pytest.raises(ValidationError, match="retries: 2 is fewer than cb_failure_threshold"):
        settings(retries=2)
    for retries, attempts in ((5, 6), (0, 1)):
        unit = render_unit(settings(retries=retries), GUESTS).replace("\\\n", " ")
        assert f"--retry-max-retries {attempts} " in " ".join(unit.split())
    settings(retries=1, cb_failure_threshold=1)


def test_bad_listen_address_is_refused() -> None:
    with pytest.raises(ValidationError, match="not an IP address"):
        settings(listen_address="router.lab")


def test_the_router_pin_installs_only_from_its_committed_lock() -> None:
    lock = load_router_lock("0.1.17", "rt")
    assert lock.name == "vllm-router-0.1.17.py311-x86_64-manylinux_2_36.txt"
    assert "vllm-router==0.1.17" in lock.path.read_text()
    with pytest.raises(LockError, match="python -m llmhost.locks compile --router 0.1.99"):
        load_router_lock("0.1.99", "rt")


def test_the_wait_for_a_started_router_fails_naming_the_journal_when_it_never_answers() -> None:
    """The drill of the router's start check: nothing listens on the discard port, so the
    command run on the router host gives up within its bound, exit 1, saying where to look."""
    settings = RouterSettings(listen_address="127.0.0.1", port=9)
    proc = subprocess.run(
        answers_command(settings, timeout_s=2),
        shell=True,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 1
    assert "http://127.0.0.1:9/list_workers did not answer within 2 s" in proc.stderr
    assert "journalctl -u vllm-router.service" in proc.stderr


def test_the_wait_for_a_router_listening_everywhere_asks_loopback() -> None:
    assert "http://127.0.0.1:8080/list_workers" in answers_command(
        RouterSettings(listen_address="0.0.0.0")
    )
    assert "http://[::1]:8080/list_workers" in answers_command(RouterSettings(listen_address="::"))
