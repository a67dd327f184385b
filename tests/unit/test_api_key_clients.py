"""Every llmhost client sends the API key: readiness, correctness, the benchmark (in process
and as the child the throughput gate runs, which gets it through its environment), `ask`."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pydantic import SecretStr

from llmhost import cli
from llmhost.bench.result import RunConfig
from llmhost.bench.sweep import sweep
from llmhost.catalog import BenchProfile
from llmhost.correctness import greedy
from llmhost.endpoint import Endpoint
from llmhost.proofs import sweep as verify
from llmhost.proofs.readiness import (
    API_KEY_ENV,
    api_key_from_env,
    auth_headers,
    probe_once,
    wait_ready,
)
from llmhost.testbed import sandbox
from tests.helpers import FakeVLLM

KEY = "sk-llmhost-unit-test-0123456789abcdef"
BEARER = f"Bearer {KEY}"
BENCH = BenchProfile(
    input_len=6,
    output_len=3,
    tolerance=0.1,
    baselines={1: 1.0, 2: 1.0},
    prompts_per_concurrency=1,
    min_prompts=2,
    warmup_requests=1,
)


def test_auth_headers_come_from_a_secretstr_and_none_gives_no_header() -> None:
    assert auth_headers(SecretStr(KEY)) == {"Authorization": BEARER}
    assert auth_headers(KEY) == {"Authorization": BEARER}
    assert auth_headers(None) == {} and auth_headers(SecretStr("")) == {}
    assert api_key_from_env({API_KEY_ENV: f" {KEY}\n"}).get_secret_value() == KEY
    assert api_key_from_env({}) is None and api_key_from_env({API_KEY_ENV: ""}) is None


def test_readiness_sends_the_key_on_models_and_the_completion() -> None:
    with FakeVLLM(key=KEY) as server:
        result = probe_once(server.url, "m", headers=auth_headers(SecretStr(KEY)))
    assert result.ready, result.detail
    assert server.auth("/v1/models") == [BEARER]
    assert server.auth("/v1/completions") == [BEARER]
    assert server.auth("/health") == [None]  # open: the key goes only where it is needed


def test_readiness_without_the_right_key_stops_at_once_and_never_shows_a_key() -> None:
    with FakeVLLM(key=KEY) as server:
        missing = probe_once(server.url, "m")
        wrong = wait_ready(
            server.url, "m", timeout_s=600, log=print, headers={"Authorization": "Bearer nope"}
        )
    assert (missing.ready, missing.stage) == (False, "auth")
    assert "/v1/models answered 401" in missing.detail and "none was sent" in missing.detail
    assert (wrong.ready, wrong.stage) == (False, "auth")
    assert "refuses the API key sent" in wrong.detail
    assert wrong.waited_s < 5, "a refused key must not be polled until the load timeout"
    assert "nope" not in wrong.detail and KEY not in missing.detail


def test_an_endpoint_keeps_one_connection_and_outlives_a_restart_of_its_server() -> None:
    """The Endpoint's session: readiness and the correctness probe's completions share one
    connection; one the server closed (its keep-alive timeout, then a restart on the same
    port) is replaced, not failed on. Without the session every request opens its own."""
    with FakeVLLM(key=KEY, keep_alive_s=0.5) as server:
        at = Endpoint(server.url, "m", SecretStr(KEY))
        assert at.probe().ready and at.probe().ready
        greedy(at.base_url, "m", "probe", 4, headers=at.headers(), http=at.http)
        assert len(server.peers) == 7 and len(set(server.peers)) == 1, server.peers
        old = server.peers[0]
    time.sleep(1.0)  # the old server's handler closes its idle connection
    with FakeVLLM(key=KEY, keep_alive_s=0.5, port=server.port) as restarted:
        again = at.wait_ready(timeout_s=10, log=print, interval_s=0.1)
        assert again.ready and again.waited_s < 2, again.detail
        assert old not in restarted.peers and len(set(restarted.peers)) == 1
    with FakeVLLM(key=KEY, keep_alive_s=0.5) as plain:
        assert probe_once(plain.url, "m", headers=auth_headers(SecretStr(KEY))).ready
        assert len(set(plain.peers)) == 3  # no session: a connection a request


def test_a_keyless_caller_still_works_against_an_open_server() -> None:
    with FakeVLLM() as server:
        assert probe_once(server.url, "m").ready
        assert wait_ready(server.url, "m", timeout_s=5, log=print).ready


def test_the_correctness_probe_sends_the_key() -> None:
    with FakeVLLM(key=KEY) as server:
        done = greedy(
            server.url, "m", "The capital of France is", 4, headers={"Authorization": BEARER}
        )
    assert done.text == " Paris" and done.output_ids == [5]
    assert server.auth("/v1/completions") == [BEARER]


def test_the_sweep_sends_the_key_on_every_request_and_keeps_it_out_of_the_results() -> None:
    with FakeVLLM(key=KEY) as server:
        results = sweep(
            server.url,
            "m",
            BENCH,
            [1, 2],
            {"model_profile": "tiny"},
            False,
            headers={"Authorization": BEARER},
        )
    assert [r.completed for r in results] == [2, 2] and all(r.failed == 0 for r in results)
    # 2 x (2 measured + 1 warm-up) streamed completions, every one with the key.
    assert server.auth("/v1/completions") == [BEARER] * 6
    assert set(server.auth("/tokenize")) == {BEARER}
    saved = json.dumps([r.to_json() for r in results])
    assert KEY not in saved
    assert set(RunConfig.__dataclass_fields__).isdisjoint({"api_key", "headers", "key"})


class RecordedRun:
    """subprocess.run as the throughput gate calls it: argv and environment recorded."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[tuple[list[str], dict[str, str]]] = []
        real = subprocess.run

        def run(argv, **kwargs):  # noqa: ANN001, ANN202 - subprocess.run's signature
            self.calls.append((list(argv), dict(kwargs.get("env") or {})))
            return real(argv, **kwargs)

        monkeypatch.setattr(verify.subprocess, "run", run)


def bench_run(url: str, results_dir: Path, api_key: SecretStr | None) -> verify.BenchRun:
    labels = {"host": "10.99.0.12", "host_profile": "sandbox", "model_profile": "tiny"}
    return verify.BenchRun(Endpoint(url, "m", api_key), "tiny", BENCH, labels, str(results_dir))


def test_the_gate_child_gets_the_key_in_its_environment_never_in_argv(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(API_KEY_ENV, "a-stale-key-of-the-caller-shell")
    recorded = RecordedRun(monkeypatch)
    with FakeVLLM(key=KEY) as server:
        run = bench_run(server.url, tmp_path / "results", SecretStr(KEY))
        results = verify.run_sweep(run)
    assert [r.completed for r in results] == [2, 2]
    [(argv, env)] = [c for c in recorded.calls if "llmhost.bench" in c[0]]
    assert argv[:3] == [sys.executable, "-m", "llmhost.bench"]
    assert not any(KEY in arg for arg in argv), argv
    assert env[API_KEY_ENV] == KEY
    assert set(server.auth("/v1/completions")) == {BEARER}
    path = run.save("gate", results, {"gate": "off"})
    files = [p for p in (tmp_path / "results").rglob("*") if p.is_file()]
    assert path in files and len(files) >= 3  # the run, history.jsonl, the plots
    assert not [p for p in files if KEY.encode() in p.read_bytes()]
    out, err = capfd.readouterr()
    assert KEY not in out + err
    assert KEY not in repr(run) and "api_key" not in repr(run)


def test_without_a_key_the_child_sends_none_not_the_callers_variable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(API_KEY_ENV, "a-stale-key-of-the-caller-shell")
    assert API_KEY_ENV not in verify.sweep_env(None)
    assert verify.sweep_env(SecretStr(KEY))[API_KEY_ENV] == KEY
    with FakeVLLM() as server:
        results = verify.run_sweep(bench_run(server.url, tmp_path, None))
    assert all(r.failed == 0 for r in results)
    assert set(server.auth("/v1/completions")) == {None}


def test_the_benchmark_by_hand_reads_the_key_from_the_environment(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "bench.json"
    with FakeVLLM(key=KEY) as server:
        argv = [sys.executable, "-m", "llmhost.bench", "--url", server.url, "--model", "m"]
        argv += ["--input-len", "6", "--output-len", "3", "--num-prompts", "2", "-c", "1"]
        argv += ["--json", str(out), "--no-progress"]
        env = {**verify.sweep_env(None), API_KEY_ENV: KEY}
        proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert set(server.auth("/v1/completions")) == {BEARER}
    assert KEY not in out.read_text() + proc.stdout + proc.stderr


def test_ask_sends_the_environment_key_else_the_sandbox_key_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    key_file = tmp_path / "api-key"
    monkeypatch.setattr(sandbox, "API_KEY_FILE", key_file)
    monkeypatch.delenv(API_KEY_ENV, raising=False)
    assert cli.ask_api_key() is None  # no variable, no key file
    key_file.write_text(KEY + "\n")
    assert cli.ask_api_key().get_secret_value() == KEY
    monkeypatch.setenv(API_KEY_ENV, "sk-from-the-environment-1234")
    assert cli.ask_api_key().get_secret_value() == "sk-from-the-environment-1234"
    monkeypatch.delenv(API_KEY_ENV)

    with FakeVLLM(key=KEY) as server:
        host, port = server.url.removeprefix("http://").split(":")
        monkeypatch.setattr(sandbox, "load_state", lambda: type("S", (), {"ip": host})())
        assert cli.ask_sandbox("Hello", int(port), 4) == 0
        key_file.write_text("sk-not-the-servers-key-1234\n")
        assert cli.ask_sandbox("Hello", int(port), 4) == 1
    assert set(server.auth("/v1/chat/completions")) == {BEARER}
    out, err = capsys.readouterr()
    assert "refuses the API key sent" in err and KEY not in out + err
