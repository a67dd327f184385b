"""The API key in pyinfra: the proofs get it as a SecretStr and pyinfra never shows it.

The operations run here through pyinfra's own API on @local (the load proofs as their one
FunctionCommand, the others with no command; their requests go to a stand-in server),
auto-named so that pyinfra attaches and prints their arguments, with pyinfra's logger at
DEBUG (what -vvv shows).
"""

from __future__ import annotations

import inspect
import io
import json
import logging
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import SecretStr
from pyinfra.api import Config, Inventory, State
from pyinfra.api.connect import connect_all
from pyinfra.api.operation import add_op
from pyinfra.api.operations import run_ops

from llmhost.bench.guest_bench import GuestBench, bench_command
from llmhost.catalog import BenchProfile, CorrectnessProfile, GoldenAnswer
from llmhost.endpoint import Endpoint
from llmhost.operations.log import guest_run
from llmhost.operations.serving import ready
from llmhost.operations.verify import BenchRun, Cadence, CorrectnessCheck, correct, load_proofs
from llmhost.secrets import ResolvedSecrets
from llmhost.tasks.hooks import hooks
from tests.helpers import FakeVLLM

KEY = "sk-llmhost-secrecy-test-fedcba9876543210"
BEARER = f"Bearer {KEY}"


@pytest.fixture
def pyinfra_log() -> Iterator[io.StringIO]:
    """Everything pyinfra logs, DEBUG included."""
    buffer = io.StringIO()
    handler = logging.StreamHandler(buffer)
    handler.setLevel(logging.DEBUG)
    logger = logging.getLogger("pyinfra")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    yield buffer
    logger.removeHandler(handler)
    logger.setLevel(level)


def local_state() -> State:
    state = State(Inventory((["@local"], {})), Config())
    connect_all(state)
    return state


def test_a_secretstr_shows_as_stars_and_still_hashes() -> None:
    key = SecretStr(KEY)
    assert str(key) == "**********" and KEY not in repr(key)
    assert hash(key) == hash(SecretStr(KEY))  # pyinfra may hash arguments: it can
    secrets = ResolvedSecrets(api_key=key)
    assert KEY not in repr(secrets) and secrets.auth_headers() == {"Authorization": BEARER}


def test_the_proofs_send_the_key_and_pyinfra_never_shows_it(
    tmp_path: Path, pyinfra_log: io.StringIO, capfd: pytest.CaptureFixture[str]
) -> None:
    key = SecretStr(KEY)
    bench = BenchProfile(
        input_len=6,
        output_len=3,
        tolerance=0.5,
        baselines={1: 0.001},
        prompts_per_concurrency=1,
        min_prompts=2,
        warmup_requests=1,
    )
    correctness = CorrectnessProfile(
        golden=(GoldenAnswer(prompt="The capital of France is", expect="Paris"),)
    )
    with FakeVLLM(key=KEY) as server:
        run = BenchRun(
            Endpoint(server.url, "m", key),
            "tiny",
            bench,
            {"host": "sbx", "model_profile": "tiny"},
            str(tmp_path / "results"),
            shell=guest_run,
        )
        state = local_state()
        # No name=: pyinfra then attaches every argument to the operation's printed name.
        add_op(
            state,
            ready,
            unit="llmhost-m.service",
            endpoint=Endpoint(server.url, "m", key),
            timeout_s=30,
        )
        check = CorrectnessCheck(
            endpoint=Endpoint(server.url, "m", key),
            model="tiny",
            correctness=correctness,
            model_dir="/nowhere",
            python="python3",
            refcheck="/nowhere/refcheck.py",
        )
        add_op(state, correct, check=check)
        last_gate = tmp_path / "last-gate"
        cadence = Cadence("full", 3600, None, str(last_gate))
        add_op(state, load_proofs, run=run, gate=True, cadence=cadence)
        run_ops(state)
    # Every /v1 request carried the key; all four proofs passed.
    v1 = [auth for _, path, auth in server.seen if path.startswith("/v1")]
    assert v1 and set(v1) == {BEARER}
    assert not state.failed_hosts
    assert last_gate.read_text().strip().isdigit()  # the load proofs' step ran on the host
    log = pyinfra_log.getvalue()
    assert "READY m at" in log and "correctness OK for tiny" in log
    # The readiness operation's endpoint argument was printed, without its key (Endpoint's
    # repr leaves it out); not in pyinfra's log, the printed arguments, stdout/stderr, results.
    args = [arg for meta in state.op_meta.values() for arg in meta.args]
    assert [a for a in args if a.startswith("endpoint=") and "served_name='m'" in a], args
    assert "endpoint=" in log
    assert not [a for a in args if KEY in a]
    out, err = capfd.readouterr()
    assert KEY not in log + out + err
    saved = [p for p in (tmp_path / "results").rglob("*") if p.is_file()]
    assert saved and not [p for p in saved if KEY.encode() in p.read_bytes()]
    record = json.loads(next(p for p in saved if p.name.endswith("-gate.json")).read_text())
    assert record["results"][0]["completed"] == 2


def test_hooks_takes_the_resolved_secrets_second() -> None:
    params = inspect.signature(getattr(hooks, "_inner", hooks)).parameters
    assert list(params) == ["cfg", "secrets", "restarts", "switch", "node_exporter"]
    assert params["secrets"].annotation in (ResolvedSecrets, "ResolvedSecrets")
    assert params["restarts"].default is None


@pytest.mark.parametrize("key", [KEY, "ab$cd;touch /tmp/llmhost-pwned`id`"])
def test_the_gates_vllm_bench_serve_gets_the_key_from_the_guests_env_file(
    tmp_path: Path, key: str
) -> None:
    env_file = tmp_path / "llmhost-tiny-llama.env"
    env_file.write_text(f"VLLM_CPU_KVCACHE_SPACE=1\nVLLM_API_KEY={key}\n")
    guest = GuestBench(
        "/venv/bin/python", "/opt/llmhost/bin/bench_levels.py", None, 8000, "/srv/m", str(env_file)
    )
    bench = BenchProfile(input_len=8, output_len=8, tolerance=0.5, baselines={1: 1.0})
    command = bench_command(guest, bench, "m", [1], "/tmp/x")
    assert key not in command and "OPENAI_API_KEY=" in command
    # What the guest's shell does with it: vllm gets $OPENAI_API_KEY in its environment,
    # the key read as data (never run as shell code, whatever characters it holds).
    prefix = command.split(" HF_HUB_OFFLINE=1 ")[0]
    shown = subprocess.run(
        ["sh", "-c", f"{prefix} sh -c 'printf %s \"$OPENAI_API_KEY\"'"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert shown.stdout == key
    assert not Path("/tmp/llmhost-pwned").exists()
