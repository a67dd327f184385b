"""The sandbox as a site (inventory/sandbox.py: the stand-in under proxmox_hosts, the guest
under its guest group): each deploy acts on its own role; `llmhost site` brings a hard-stopped
site back serving in one command, the Proxmox host starting its stopped guest; bad data and a
taken port are refused before anything changes; Ctrl-C during a readiness wait ends the run
at once and non-zero, and during the gate it also ends the benchmark it started on the guest."""

from __future__ import annotations

import subprocess
import time

import pytest

from llmhost.config.guest import GuestConfig
from llmhost.testbed import sandbox as sandbox_ctl
from llmhost.testbed import standin
from llmhost.testbed.sandbox import SandboxState
from tests.helpers import (
    PYINFRA,
    SITE,
    Run,
    bench_pids,
    changed_ops,
    guest_sh,
    interrupt_when,
    llmhost_site,
    pyinfra,
    refusal_summary,
    standin_recorded,
    started_operations,
)

HOST = ("inventory/sandbox.py", "deploys/host.py")
SERVE = ("inventory/sandbox.py", "deploys/serve.py")
UNIT = "llmhost-tiny-llama.service"
ENV_FILE = "/etc/llmhost/llmhost-tiny-llama.env"


def test_each_deploy_leaves_the_hosts_of_other_roles_alone(site: GuestConfig) -> None:
    host = pyinfra(*HOST)
    assert host.rc == 0, host.tail()
    assert f"[{site.host_name}] host.py: not a Proxmox host (sandbox), left alone" in host.output
    serve = pyinfra(*SERVE)
    assert serve.rc == 0, serve.tail()
    groups = "monitoring, proxmox_hosts, routers"
    left = f"[{standin.IP}] serve.py: not a serving guest ({groups}), left alone"
    assert left in serve.output
    assert "READY tiny-llama" in serve.output and not changed_ops(serve.output)


def hard_stop(names: list[str]) -> None:
    for name in names:
        subprocess.run(["lxc-stop", "-n", name, "-k"], check=True, timeout=120)


def start_and_wait(names: list[str]) -> None:
    key = sandbox_ctl.STATE_DIR / "id_ed25519"
    ips = {sandbox_ctl.CONTAINER: sandbox_ctl.GUEST_IP, standin.NAME: standin.IP}
    for name in names:
        subprocess.run(["lxc-start", "-n", name, "-d"], check=True, timeout=120)
    for name in names:
        sandbox_ctl.wait_booted(name=name)
        sandbox_ctl.wait_ssh(key, ip=ips[name])


def runs_of(site_run: Run) -> tuple[str, str]:
    """(the Proxmox hosts' run, the site run) of one `llmhost site` output."""
    first, marker, second = site_run.output.partition("--> the site")
    assert marker, site_run.tail()
    return first, second


def test_a_hard_stopped_site_comes_back_serving_with_one_command(site: GuestConfig) -> None:
    # A power cut: the Proxmox host boots again, its guest does not (the stand-in does not
    # start guests at boot as Proxmox does for onboot: 1): pyinfra alone would fail the guest
    # at connect, before the host step that starts it.
    hard_stop([standin.NAME, sandbox_ctl.CONTAINER])
    start_and_wait([standin.NAME])
    assert not sandbox_ctl.container_running(sandbox_ctl.CONTAINER)
    mark = len(standin_recorded())
    run = llmhost_site()
    assert run.rc == 0, run.tail()
    hosts_run, site_run = runs_of(run)
    # The stand-in's `pct start 201` started the guest (the test bed's bridge: the sandbox).
    assert "pct start 201" in standin_recorded()[mark:]
    assert any(op.endswith("| LXC guest 201 running") for op in changed_ops(hosts_run))
    # Then the site: Proxmox hosts first, then the guests, in site.py's order.
    first_guest_op = site_run.index("Starting operation: llmhost guest base")
    barrier = site_run.index("Starting operation: Proxmox hosts done: serving guests next")
    assert site_run.index("Starting operation: Proxmox host:") < barrier < first_guest_op
    assert "GPU passthrough block of LXC guest 201" in site_run[:first_guest_op]
    assert "READY tiny-llama at http://" in site_run
    assert "correctness OK for tiny-llama" in site_run
    again = llmhost_site()
    assert again.rc == 0, again.tail()
    for part in runs_of(again):
        assert not changed_ops(part, errors_too=True)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ("service_user=root", "service_user: 'root' is a system account"),
        ("bind_address=10.99.0.300", "bind_address: '10.99.0.300' is not an IP address"),
        (
            'secrets={"api_key": {"env": "LLMHOST_NO_SUCH_KEY"}}',
            "secrets.api_key: environment variable LLMHOST_NO_SUCH_KEY is not set",
        ),
        ('secrets={"api_key": "sk-literal-secret-1234"}', "secrets.api_key"),
    ],
)
def test_bad_data_for_the_new_fields_is_refused_before_any_operation(
    site: GuestConfig, sandbox: SandboxState, data: str, message: str
) -> None:
    before = guest_sh(sandbox, f"sha256sum {ENV_FILE} /etc/systemd/system/{UNIT}")
    run = pyinfra(*SITE, "--data", data)
    assert run.rc != 0
    assert f"invalid group_data for host '{site.host_name}'" in run.output, run.tail()
    assert message in run.output, run.tail()
    assert "Starting operation" not in run.output
    assert "sk-literal-secret-1234" not in run.output  # not even the refused literal
    assert guest_sh(sandbox, f"sha256sum {ENV_FILE} /etc/systemd/system/{UNIT}") == before


def test_a_port_held_by_another_server_refuses_the_guest_and_names_it(
    site: GuestConfig, sandbox: SandboxState
) -> None:
    guest_sh(
        sandbox,
        "systemd-run --unit=foreign-vllm --collect python3 -m http.server 8011 --bind 0.0.0.0",
    )
    try:
        time.sleep(1.5)
        before = guest_sh(sandbox, "ls /etc/systemd/system/")
        run = pyinfra(*SERVE, "--dry", "--data", "port=8011")  # --dry says it too
        assert "REFUSED (the guest's live state): port 8011" in run.output, run.tail()
        run = pyinfra(*SERVE, "--data", "port=8011")
        assert run.rc != 0
        assert "port 8011 (for tiny-llama) is already held by pid " in run.output, run.tail()
        assert "python3 -m http.server 8011" in run.output
        assert "unit foreign-vllm.service" in run.output
        assert started_operations(run.output) == ["refused: the guest's live state"]
        assert refusal_summary(run.output)[0].startswith(f"{sandbox.ip}: port 8011 (for tiny")
        assert guest_sh(sandbox, "ls /etc/systemd/system/") == before
        assert guest_sh(sandbox, f"systemctl is-active {UNIT}") == "active"
    finally:
        guest_sh(sandbox, "systemctl stop foreign-vllm.service", check=False)


SYSCTL_FILE = "/etc/sysctl.d/90-llmhost.conf"


def test_a_refused_guest_stops_no_other_host_the_stand_in_is_converged(
    site: GuestConfig, sandbox: SandboxState
) -> None:
    """After a reboot a stale server holds the guest's port, and the Proxmox host drifted:
    one site run repairs the host and refuses the guest alone, naming the holder, and exits
    non-zero; once the port is free the next run converges the guest."""
    drift = "vm.swappiness = 60  # edited by hand"
    standin.ssh(f"echo {drift!r} >> {SYSCTL_FILE}")
    guest_sh(sandbox, f"systemctl stop {UNIT}")
    guest_sh(
        sandbox,
        "systemd-run --unit=foreign-vllm --collect python3 -m http.server 8000 --bind 0.0.0.0",
    )
    try:
        time.sleep(1.5)
        run = pyinfra(*SITE)
        assert run.rc != 0, run.tail()
        assert "port 8000 (for tiny-llama) is already held by pid " in run.output, run.tail()
        assert "python3 -m http.server 8000" in run.output
        assert drift not in (standin.ssh(f"cat {SYSCTL_FILE}") or ""), "the drift stayed"
        summary = refusal_summary(run.output)  # the guest alone: the stand-in converged
        assert len(summary) == 1 and summary[0].startswith(f"{sandbox.ip}: port 8000"), summary
        assert guest_sh(sandbox, f"systemctl is-active {UNIT}", check=False) != "active"
    finally:
        guest_sh(sandbox, "systemctl stop foreign-vllm.service", check=False)
    again = pyinfra(*SITE)
    assert again.rc == 0, again.tail()
    assert guest_sh(sandbox, f"systemctl is-active {UNIT}") == "active"


def test_ctrl_c_during_a_readiness_wait_exits_at_once_and_the_next_run_converges(
    site: GuestConfig, sandbox: SandboxState
) -> None:
    # A newer env file than the running server: the deploy restarts it and waits for it.
    guest_sh(sandbox, f"touch {ENV_FILE}")
    rc, output, took = interrupt_when([PYINFRA, "-y", *SERVE], "waiting for http://")
    assert rc != 0, output[-3000:]
    assert took <= 2.0, f"Ctrl-C took {took:.1f}s to end the run"
    assert f"interrupted by Ctrl-C during readiness of {UNIT}" in output, output[-3000:]
    leftovers = guest_sh(sandbox, "ls /etc/llmhost /etc/systemd/system | grep llmhost-new || true")
    assert leftovers == ""
    run = pyinfra(*SERVE)
    assert run.rc == 0, run.tail()
    assert "READY tiny-llama" in run.output
    again = pyinfra(*SERVE)
    assert again.rc == 0 and not changed_ops(again.output, errors_too=True), again.tail()


def test_ctrl_c_during_the_gate_ends_the_benchmark_on_the_guest_too(
    site: GuestConfig, sandbox: SandboxState
) -> None:
    def loading() -> None:  # the benchmark runs on the guest before the Ctrl-C
        deadline = time.monotonic() + 60
        while not bench_pids(sandbox) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert bench_pids(sandbox), "the benchmark never started on the guest"
        time.sleep(3)

    argv = [PYINFRA, "-y", *SERVE, "--data", 'verify={"mode": "full", "draft_ab": "never"}']
    rc, output, took = interrupt_when(argv, "vllm bench serve on the guest", before_signal=loading)
    assert rc == 130, output[-3000:]
    assert took <= 5.0, f"Ctrl-C took {took:.1f}s to end the run"
    assert "interrupted by Ctrl-C during the benchmark of tiny-llama" in output, output[-3000:]
    gone = time.monotonic() + 5  # within 5 s of the run's end: nothing left loading the server
    while bench_pids(sandbox) and time.monotonic() < gone:
        time.sleep(0.2)
    assert not bench_pids(sandbox), "the benchmark still runs on the guest after Ctrl-C"
