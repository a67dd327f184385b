"""vllm-router in front of the sandbox guest, on the stand-in (inventory/sandbox.py: `routers`),
installed by deploys/site.py from its hashed lock: requests pass through it with the key and
are refused without it (the worker checks the key; the router forwards it), its workers are the
inventory's serving guests, and router data the inventory cannot back stops the run before any
operation."""

from __future__ import annotations

import pytest
import requests

from llmhost.config.guest import GuestConfig
from llmhost.testbed import standin
from llmhost.testbed.sandbox import SandboxState
from tests.helpers import SITE, api_headers, api_key, pyinfra

ROUTER = f"http://{standin.IP}:8080"


def test_a_completion_passes_through_the_router_with_the_key(site: GuestConfig) -> None:
    body = {"model": site.profile.served_name, "prompt": "Hello", "max_tokens": 8}
    reply = requests.post(f"{ROUTER}/v1/completions", json=body, headers=api_headers(), timeout=60)
    assert reply.status_code == 200, reply.text
    assert reply.json()["usage"]["completion_tokens"] == 8


def test_without_the_key_the_router_refuses_too(site: GuestConfig) -> None:
    body = {"model": site.profile.served_name, "prompt": "Hello", "max_tokens": 8}
    reply = requests.post(f"{ROUTER}/v1/completions", json=body, timeout=60)
    assert reply.status_code == 401, reply.text


def test_its_workers_are_the_inventorys_serving_guests(
    site: GuestConfig, sandbox: SandboxState
) -> None:
    listed = requests.get(f"{ROUTER}/list_workers", timeout=10).json()
    assert listed["urls"] == [f"http://{sandbox.ip}:{site.port}"]


def test_it_runs_as_its_own_user_with_its_metrics_on_their_own_port(site: GuestConfig) -> None:
    main_pid = "$(systemctl show -p MainPID --value vllm-router.service)"
    uid = standin.ssh(f"ps -o uid= -p {main_pid}") or ""
    assert uid.strip() == (standin.ssh("id -u vllm-router") or "").strip() != "0", uid
    metrics = requests.get(f"http://{standin.IP}:29000/metrics", timeout=10)
    assert metrics.status_code == 200 and "vllm_router" in metrics.text
    unit = standin.ssh("systemctl cat vllm-router.service") or ""
    assert "--health-check-interval-secs 2" in " ".join(unit.replace("\\\n", " ").split())


def test_its_unit_passes_the_model_units_state_checks(site: GuestConfig) -> None:
    """What tests/state/guest asserts of a model unit, and the secrecy of test_serve_sandbox:
    a system account that cannot log in, enabled and running, its ports open, a root-owned
    unit file, and the key in none of its argv, environment, unit or journal (the router
    forwards the client's header and holds no key)."""
    user = (standin.ssh("getent passwd vllm-router") or "").strip().split(":")
    assert int(user[2]) < 1000 and user[6] == "/usr/sbin/nologin", user
    states = standin.ssh("systemctl is-enabled vllm-router; systemctl is-active vllm-router")
    assert (states or "").split() == ["enabled", "active"], states
    listening = standin.ssh("ss -Hltn") or ""
    for port in (8080, 29000):
        assert f":{port} " in listening, f"nothing listens on {port}: {listening}"
    owner = standin.ssh("stat -c '%U %a' /etc/systemd/system/vllm-router.service") or ""
    assert owner.split() == ["root", "644"], owner
    main_pid = "$(systemctl show -p MainPID --value vllm-router.service)"
    seen = standin.ssh(
        f"tr '\\0' ' ' < /proc/{main_pid}/cmdline; echo; tr '\\0' '\\n' < /proc/{main_pid}/environ;"
        " systemctl cat vllm-router.service; journalctl -u vllm-router.service --no-pager -n 5000"
    )
    assert seen and "vllm-router" in seen
    assert api_key() not in seen, "the API key is in the router's argv, environment or journal"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            'router={"listen_address": "10.99.0.13", "workers": ["10.99.0.99"]}',
            "router.workers: '10.99.0.99' is not a serving guest of this inventory",
        ),
        (
            'router={"listen_address": "10.99.0.13", "prometheus_port": 9090}',
            "router.prometheus_port: 9090 is taken by Prometheus on this host",
        ),
        (
            'router={"listen_address": "10.99.0.13", "port": 8080, "prometheus_port": 8080}',
            "router.prometheus_port: 8080 is also router.port",
        ),
    ],
)
def test_bad_router_data_is_refused_before_any_operation(
    site: GuestConfig, data: str, message: str
) -> None:
    before = standin.ssh("sha256sum /etc/systemd/system/vllm-router.service")
    run = pyinfra(*SITE, "--data", data)
    assert run.rc != 0
    assert f"invalid group_data for host '{standin.IP}'" in run.output, run.tail()
    assert message in run.output, run.tail()
    assert "Starting operation" not in run.output
    assert standin.ssh("sha256sum /etc/systemd/system/vllm-router.service") == before
