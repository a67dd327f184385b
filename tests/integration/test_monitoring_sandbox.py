"""The site seen running: Prometheus and Alertmanager (Debian's packages) on the stand-in,
node exporter on it and on the guest, vLLM's /metrics scraped, and the alerts firing in drills.

The sandbox's monitoring data (inventory/sandbox.py) scrapes every 5 s and fires "replica
down" after 15 s and "GPU held" after 10 s, so each drill takes seconds. Alerts are read
through Prometheus's HTTP API, as an operator's tooling would.
"""

from __future__ import annotations

import json
import re
import shlex
import time
from collections.abc import Iterator

import pytest
import requests

from llmhost.config.guest import GuestConfig
from llmhost.config.loading import load_monitoring
from llmhost.inventory import get_host
from llmhost.monitoring import gate_text, gate_textfile
from llmhost.naming import proof_record
from llmhost.proofs.readiness import wait_ready
from llmhost.testbed import sandbox as sandbox_ctl
from llmhost.testbed import standin
from llmhost.testbed.sandbox import SandboxState
from tests.helpers import (
    REPO,
    RESULTS,
    SERVE,
    SITE,
    api_headers,
    changed_ops,
    guest_sh,
    pyinfra,
)

SANDBOX_INVENTORY = str(REPO / "inventory" / "sandbox.py")
UNIT = "llmhost-tiny-llama.service"
RULE_TESTS = REPO / "tests" / "fixtures" / "monitoring" / "rule-tests.yml"


@pytest.fixture(scope="module")
def settings():
    return load_monitoring(get_host(SANDBOX_INVENTORY, standin.IP)).monitoring


@pytest.fixture(scope="module")
def prometheus_url(site: GuestConfig, settings) -> str:
    """The site converged (conftest's `site`: deploys/site.py), Prometheus answering."""
    url = f"http://{settings.listen_address}:{settings.port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if requests.get(f"{url}/-/ready", timeout=5).ok:
                return url
        except requests.RequestException:
            pass
        time.sleep(1)
    pytest.fail(f"Prometheus at {url} not ready after 60 s")


def api(url: str, path: str, **params: str) -> dict:
    reply = requests.get(f"{url}/api/v1/{path}", params=params, timeout=10)
    reply.raise_for_status()
    return reply.json()["data"]


def firing(url: str, alert: str) -> list[dict]:
    return [
        a
        for a in api(url, "alerts")["alerts"]
        if a["labels"]["alertname"] == alert and a["state"] == "firing"
    ]


def wait_until(check, timeout_s: float, what: str, seen=None) -> float:
    """Seconds until check() is true; fails the test naming what it waited for (and what
    `seen()` then says, where given)."""
    start = time.monotonic()
    while time.monotonic() - start < timeout_s:
        if check():
            return time.monotonic() - start
        time.sleep(0.5)
    pytest.fail(f"{what}: not within {timeout_s:.0f} s" + (f"; {seen()}" if seen else ""))


def record_drill(name: str, fired_after_s: float, bound_s: float, settings, for_s: int) -> None:
    """Each drill's measured time, kept under results/monitoring/ (the docs cite a copy)."""
    out = REPO / "results" / "monitoring"
    out.mkdir(parents=True, exist_ok=True)
    entry = {
        "drill": name,
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "fired_after_s": round(fired_after_s, 1),
        "bound_s": bound_s,
        "for_s": for_s,
        "scrape_interval_s": settings.scrape_interval_s,
        "evaluation_interval_s": settings.evaluation_interval_s,
        "method": "stopped (or nvidia-smi answering held) at t=0; /api/v1/alerts polled every "
        "0.5 s until the alert is firing",
    }
    with (out / "drills.jsonl").open("a") as handle:
        handle.write(json.dumps(entry) + "\n")


def standin_sh(command: str) -> str:
    return (standin.ssh(command) or "").strip()


def test_a_second_site_run_changes_nothing(prometheus_url: str) -> None:
    run = pyinfra(*SITE)
    assert run.rc == 0, run.tail()
    assert not changed_ops(run.output, errors_too=True)
    assert "Prometheus scrapes 1 vLLM and 2 node targets, 1 router" in run.output


def test_each_gated_models_last_pass_reaches_prometheus_as_the_guest_records_it(
    prometheus_url: str, site: GuestConfig, sandbox: SandboxState
) -> None:
    """The guest's record of each gated model's last passing gate (0 when there is none, so
    that GateStale fires for a model never gated) is what Prometheus holds, and no other
    model's: a file left by a model the guest no longer serves is removed by the next
    converge, which changes that and nothing else (a gate's own pass writes only its own
    model's file, so this holds only through the export)."""
    gone = gate_textfile("tiny-llama-gone")
    guest_sh(sandbox, f"printf '%s' {shlex.quote(gate_text('tiny-llama-gone', 1, 60))} > {gone}")
    run = pyinfra(*SERVE)
    assert run.rc == 0, run.tail()
    changed = changed_ops(run.output, errors_too=True)
    assert list(changed) == [
        "post-deploy hooks | node exporter: the last passing gate of each model"
    ]
    assert guest_sh(sandbox, f"test -e {gone} && echo left || echo removed") == "removed"
    gated = {m for m, _ in site.units_and_ports() if site.bench_for(m)}
    records = {
        m: guest_sh(sandbox, f"cat {proof_record(site.root_dir, m, 'last-gate')} || true")
        for m in gated
    }
    wanted = {m: int(float(text or 0)) for m, text in records.items()}

    def exported() -> dict[str, int]:
        query = f'llmhost_gate_last_pass_timestamp_seconds{{instance=~"{sandbox.ip}:.*"}}'
        result = api(prometheus_url, "query", query=query)["result"]
        return {r["metric"]["model"]: int(float(r["value"][1])) for r in result}

    def seen() -> str:
        try:
            files = guest_sh(sandbox, f"grep -H timestamp {gate_textfile('*')} || true")
            errors = api(prometheus_url, "query", query="node_textfile_scrape_error")["result"]
            targets = [
                (t["scrapeUrl"], t["health"], t["lastError"], t["lastScrape"])
                for t in api(prometheus_url, "targets")["activeTargets"]
            ]
            return (
                f"Prometheus held {exported()}; the guest's files: {files}; textfile errors: "
                f"{[(e['metric'].get('instance'), e['value'][1]) for e in errors]}; "
                f"targets {targets}"
            )
        except Exception as e:  # noqa: BLE001 - the wait's own failure is the finding
            return f"(what Prometheus held could not be read: {type(e).__name__}: {e})"

    # Two scrapes at most on a normal day; a minute, as for every target up, on a slow one.
    wait_until(
        lambda: exported() == wanted, 60, f"Prometheus holding the gate records {wanted}", seen
    )


def test_promtool_passes_the_config_and_the_rules(prometheus_url: str) -> None:
    config = standin_sh("promtool check config /etc/prometheus/prometheus.yml 2>&1")
    assert "SUCCESS" in config and "FAILED" not in config, config
    rules = standin_sh("promtool check rules /etc/prometheus/llmhost-rules.yml 2>&1")
    assert "SUCCESS: 17 rules found" in rules, rules
    am = standin_sh("amtool check-config /etc/prometheus/alertmanager.yml 2>&1")
    assert "SUCCESS" in am, am


def test_alertmanagers_file_which_may_hold_the_webhook_url_is_not_world_readable(
    prometheus_url: str,
) -> None:
    mode = standin_sh("stat -c '%a %U %G' /etc/prometheus/alertmanager.yml")
    assert mode == "640 root prometheus", mode
    assert standin_sh("systemctl is-active prometheus-alertmanager.service") == "active"


def test_every_replica_and_host_is_scraped(prometheus_url: str, sandbox: SandboxState) -> None:
    def all_up() -> bool:
        targets = api(prometheus_url, "targets")["activeTargets"]
        return len(targets) == 5 and all(t["health"] == "up" for t in targets)

    wait_until(all_up, 60, "every target up (vLLM, 2 node exporters, the router, Prometheus)")
    targets = {t["scrapeUrl"]: t["labels"] for t in api(prometheus_url, "targets")["activeTargets"]}
    assert targets[f"http://{sandbox.ip}:8000/metrics"]["replica"] == sandbox.ip
    assert targets[f"http://{sandbox.ip}:9100/metrics"]["role"] == "serving_guest"
    assert targets[f"http://{standin.IP}:9100/metrics"]["role"] == "proxmox_host"
    assert targets[f"http://{standin.IP}:29000/metrics"]["job"] == "vllm-router"


def test_prometheus_and_alertmanager_listen_only_where_the_site_says(
    prometheus_url: str, settings
) -> None:
    listening = standin_sh("ss -ltnH")
    for port in (settings.port, settings.alertmanager_port):
        bound = [line.split()[3] for line in listening.splitlines() if f":{port} " in line + " "]
        assert bound == [f"{settings.listen_address}:{port}"], listening
    assert ":9094" not in listening  # no cluster gossip port
    assert "--storage.tsdb.retention.size=1GB" in standin_sh("cat /etc/default/prometheus")


def test_no_api_key_in_any_prometheus_file_or_target_label(prometheus_url: str) -> None:
    key = sandbox_ctl.api_key()
    assert key
    files = standin_sh("cat /etc/prometheus/*.yml /etc/default/prometheus*")
    assert key not in files
    assert key not in json.dumps(api(prometheus_url, "targets"))
    assert key not in json.dumps(api(prometheus_url, "status/config"))


@pytest.fixture
def stopped_replica(sandbox: SandboxState, served: GuestConfig) -> Iterator[float]:
    """The serving unit stopped (the time it stopped); started again and ready after."""
    guest_sh(sandbox, f"systemctl stop {UNIT}")
    stopped = time.monotonic()
    try:
        yield stopped
    finally:
        guest_sh(sandbox, f"systemctl start {UNIT}")
        ready = wait_ready(
            f"http://{sandbox.ip}:{served.port}",
            str(served.profile.served_name),
            served.profile.load_timeout_s,
            log=print,
            headers=api_headers(),
        )
        assert ready.ready, ready.detail


def test_a_stopped_replica_fires_replica_down_then_resolves(
    prometheus_url: str, settings, stopped_replica: float, sandbox: SandboxState
) -> None:
    a = settings.alerts
    bound = a.replica_down_for_s + settings.scrape_interval_s + settings.evaluation_interval_s
    wait_until(
        lambda: firing(prometheus_url, "LlmhostReplicaDown"), bound + 15, "LlmhostReplicaDown"
    )
    took = time.monotonic() - stopped_replica
    record_drill("replica down", took, bound, settings, a.replica_down_for_s)
    assert took <= bound + 2, f"fired after {took:.1f} s, bound {bound} s (+2 s polling)"
    assert firing(prometheus_url, "LlmhostReplicaDown")[0]["labels"]["replica"] == sandbox.ip
    # Serving again (the fixture's restart is the replica coming back): the alert resolves.
    guest_sh(sandbox, f"systemctl start {UNIT}")
    wait_until(
        lambda: (
            not firing(prometheus_url, "LlmhostReplicaDown")
            and api(prometheus_url, "query", query='up{job="vllm"}')["result"][0]["value"][1] == "1"
        ),
        420,
        "LlmhostReplicaDown resolved",
    )


@pytest.fixture
def gpu_held() -> Iterator[None]:
    """The stand-in's nvidia-smi answers as the H200 did with an orphan holding 8 GiB."""
    standin.gpu_state("held")
    try:
        yield
    finally:
        standin.gpu_state("idle")


def test_gpu_memory_held_with_no_server_fires_on_the_standins_captures(
    prometheus_url: str, settings, gpu_held: None
) -> None:
    a = settings.alerts
    bound = a.gpu_held_for_s + 5 + settings.scrape_interval_s + settings.evaluation_interval_s
    took = wait_until(
        lambda: firing(prometheus_url, "LlmhostGpuHeldWithoutServer"),
        bound + 15,
        "LlmhostGpuHeldWithoutServer",
    )
    record_drill("GPU held without server", took, bound, settings, a.gpu_held_for_s)
    assert took <= bound + 5, f"fired after {took:.0f} s, bound {bound} s"
    alert = firing(prometheus_url, "LlmhostGpuHeldWithoutServer")[0]
    assert alert["labels"]["host"] == standin.IP
    # The orphan's own 8802 MiB: the stand-in attributes memory by process, as a host does.
    assert float(alert["value"]) == 8802 * 1024 * 1024
    standin.gpu_state("idle")
    wait_until(
        lambda: not firing(prometheus_url, "LlmhostGpuHeldWithoutServer"),
        60,
        "LlmhostGpuHeldWithoutServer resolved",
    )


def test_promtool_unit_tests_fire_each_alert_and_only_then(prometheus_url: str) -> None:
    """Alerts the sandbox cannot provoke in seconds (a queue growing for minutes, a full KV
    cache, restarts, a stale gate) fire on synthetic series in `promtool test rules`, and the
    same rules stay silent on healthy series: each test below can fail."""
    out = standin_sh(
        standin.put("/tmp/llmhost-rule-tests.yml", RULE_TESTS.read_text())
        + " && promtool test rules /tmp/llmhost-rule-tests.yml 2>&1; echo rc=$?"
    )
    assert out.endswith("rc=0") and "SUCCESS" in out, out


def test_the_state_document_reads_the_last_hour_from_prometheus(
    prometheus_url: str, sandbox: SandboxState
) -> None:
    """After the replica-down drill (its unit stopped and started again, earlier in this
    module), the guest's document shows the replica up, an engine start, and the figures of
    the last gate recorded for the host, if any.

    Whether a gate is on record depends on what ran before this module (restores between
    modules pass verify=basic), so the expected rows are read from the record itself: the
    newest `*-tiny-llama-gate.json` under results/<guest>/, or none and no rows."""
    run = pyinfra("inventory/sandbox.py", "deploys/report.py")
    assert run.rc == 0, run.tail()
    found = re.search(r"state documents written to (reports/\S+)/", run.output)
    assert found, run.tail()
    doc = json.loads((REPO / found.group(1) / f"{sandbox.ip}.json").read_text())
    section = next(s for s in doc["sections"] if s["title"] == "Running (Prometheus, last hour)")
    rows = {r["item"]: r["actual"] for r in section["rows"]}
    assert rows["up now"] == 1.0, rows
    assert isinstance(rows["engine starts"], float) and rows["engine starts"] >= 1, rows
    assert isinstance(rows["output tok/s, mean"], float), rows
    records = sorted((RESULTS / sandbox.ip).glob("*-tiny-llama-gate.json"))
    gate = json.loads(records[-1].read_text())["verdicts"]["gate"] if records else []
    expected = {
        f"last gate: c={g['concurrency']} output tok/s": round(g["measured"], 1) for g in gate
    }
    shown = {item: value for item, value in rows.items() if item.startswith("last gate: ")}
    assert shown == expected, (shown, records[-1:] or "no gate on record")
