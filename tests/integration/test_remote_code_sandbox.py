"""A model whose tokenizer is custom code, as Kimi-K2.5's is, proven on the sandbox.

`tiny-llama-remote-code` (llmhost/testbed/catalog.toml) has a tokenizer class of our own,
loaded through tokenizer_config.json's auto_map: transformers refuses it without
trust_remote_code, whoever loads it. The profile says `trust_remote_code = true`, and every
part that loads the tokenizer must pass it on: the server (`--trust-remote-code`), the
gate's `vllm bench serve`, the correctness reference. One switch to it proves readiness,
correctness and the gate; the drill shows that the gate's benchmark without the flag cannot
load the tokenizer, so the pass above is not the flag's absence going unnoticed.
"""

from __future__ import annotations

import dataclasses
import json
import shlex
import subprocess
import time
from pathlib import Path

import pytest

from llmhost.bench.guest_bench import bench_command
from llmhost.config.guest import GuestConfig
from llmhost.tasks.hooks import guest_bench
from llmhost.testbed.sandbox import SandboxState, ssh_command
from tests.helpers import SERVE, guest_sh, pyinfra

MODEL = "tiny-llama-remote-code"
UNIT = f"llmhost-{MODEL}.service"

pytestmark = pytest.mark.usefixtures("default_model_back")


@pytest.fixture(scope="module")
def switched(sandbox: SandboxState, served: GuestConfig) -> str:
    """The switch from the default model, with every proof: its output. A results directory
    of its own, so the gate judges this model on the catalog's figures, not on a baseline a
    user's earlier runs left."""
    results = f"results/remote-code-{int(time.time())}"
    # One measured run a level and no warm-up: this gate proves that the benchmark loads the
    # tokenizer and measures, judged on the catalog's figures; the gate module judges speed.
    bench = {"runs": 1, "warmup_max_runs": 0}
    verify = {"mode": "full", "results_dir": results, "draft_ab": "never", "bench": bench}
    run = pyinfra(
        *SERVE, "--data", f"served_model={MODEL}", "--data", f"verify={json.dumps(verify)}"
    )
    assert run.rc == 0, run.tail()
    return run.output


def test_a_switch_to_a_custom_code_tokenizer_is_ready_correct_and_gated(
    switched: str, sandbox: SandboxState
) -> None:
    out = switched
    assert f"SWITCH tiny-llama -> {MODEL}: done" in out, out[-4000:]
    assert f"READY {MODEL} at" in out
    assert f"correctness OK for {MODEL}" in out or ", correctness OK:" in out
    gated = [line for line in out.splitlines() if "throughput c=" in line]
    assert gated and all(" OK" in line for line in gated), "\n".join(gated) or out[-3000:]
    unit = guest_sh(sandbox, f"systemctl cat {UNIT}")
    assert "--trust-remote-code" in unit
    assert guest_sh(sandbox, f"systemctl is-active {UNIT}") == "active"


def test_the_tokenizer_is_custom_code_and_the_benchmark_needs_the_flag(
    switched: str, sandbox: SandboxState, served: GuestConfig
) -> None:
    """The drill: transformers itself refuses the tokenizer without trust_remote_code, and
    the gate's own benchmark command, built without the flag, fails on it."""
    cfg = served
    python = f"{cfg.venv_dir}/bin/python"
    model_dir = guest_sh(sandbox, f"ls -d {cfg.models_dir}/tiny-llama-custom-tokenizer")
    probe = (
        "from transformers import AutoTokenizer as A; import sys\n"
        f"t = A.from_pretrained({model_dir!r}, trust_remote_code=True); print(type(t).__name__)\n"
        f"try: A.from_pretrained({model_dir!r}, trust_remote_code=False)\n"
        "except ValueError as e: print('REFUSED', 'trust_remote_code' in str(e))\n"
    )
    said = guest_sh(sandbox, f"{python} -c {shlex.quote(probe)} < /dev/null")
    assert said.splitlines()[-2:] == ["LlmhostTinyTokenizer", "REFUSED True"], said

    bench = cfg.bench_for(MODEL)
    assert bench is not None
    bench = bench.model_copy(update={"runs": 1, "warmup_max_runs": 0, "min_prompts": 1})
    with_flag = guest_bench(cfg, MODEL, cfg.port)
    assert with_flag.trust_remote_code  # what the gate above ran with
    without = dataclasses.replace(with_flag, trust_remote_code=False)
    command = bench_command(without, bench, MODEL, [1], "/tmp/llmhost-remote-code-drill")
    key = Path(sandbox.ssh_key)
    proc = subprocess.run([*ssh_command(key), command], capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0, proc.stdout[-2000:]
    assert "trust_remote_code" in proc.stdout + proc.stderr, (proc.stdout + proc.stderr)[-3000:]
