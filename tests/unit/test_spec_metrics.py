"""Spec-decode counters parsed from /metrics captured on the sandbox (identical-weights draft)."""

from __future__ import annotations

import pytest

from llmhost.bench.spec_metrics import SpecCounters, acceptance, parse_spec_counters
from tests.helpers import FIXTURES

FIXTURE = FIXTURES / "sandbox" / "metrics-draft-same.prom"


def test_counters_from_a_real_draft_server() -> None:
    # 3 requests x 40 tokens with a byte-identical draft: 30 drafts of 3, all accepted.
    counters = parse_spec_counters(FIXTURE.read_text())
    assert counters == SpecCounters(drafts=30.0, draft_tokens=90.0, accepted_tokens=90.0)


def test_created_gauges_and_per_position_series_are_not_summed_in() -> None:
    text = FIXTURE.read_text()
    assert "vllm:spec_decode_num_drafts_created" in text
    assert "spec_decode_num_accepted_tokens_per_pos_total" in text
    assert parse_spec_counters(text).accepted_tokens == 90.0


def test_a_server_without_draft_has_no_counters() -> None:
    text = "\n".join(line for line in FIXTURE.read_text().splitlines() if "spec_decode" not in line)
    assert "vllm:generation_tokens_total" in text
    assert parse_spec_counters(text) is None


def test_acceptance_over_a_run_is_the_counter_difference() -> None:
    before = SpecCounters(drafts=10, draft_tokens=30, accepted_tokens=30)
    after = parse_spec_counters(FIXTURE.read_text())
    acc = acceptance(before, after)
    assert acc.rate == pytest.approx(1.0)
    assert acc.mean_accepted_length == pytest.approx(4.0)
    assert "acceptance 100.0% (60/60 draft tokens), mean accepted length 4.00" in acc.text()
    zero = acceptance(before, SpecCounters(drafts=20, draft_tokens=60, accepted_tokens=30))
    assert zero.rate == 0.0 and zero.mean_accepted_length == pytest.approx(1.0)


def test_counters_sum_over_engines() -> None:
    text = (
        'vllm:spec_decode_num_drafts_total{engine="0"} 5.0\n'
        'vllm:spec_decode_num_drafts_total{engine="1"} 7.0\n'
        "vllm:spec_decode_num_draft_tokens_total 36\n"
        "vllm:spec_decode_num_accepted_tokens_total 1.2e1\n"
    )
    assert parse_spec_counters(text) == SpecCounters(12.0, 36.0, 12.0)
