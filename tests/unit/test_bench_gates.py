"""The verdicts the post-deploy hooks print: throughput gate, draft A/B, correctness."""

from __future__ import annotations

import pytest

from llmhost.bench.gates import draft_ab, throughput_gate
from llmhost.bench.result import RequestOutcome, RunConfig, percentile, summarize
from llmhost.catalog import BenchProfile, load_catalog
from llmhost.correctness import Completion, degenerate_reason, judge


def level(conc: int, tok_s: float) -> object:
    config = RunConfig("http://x", "m", 8, 10, conc, 4, 0, 0)
    # 4 requests of 10 tokens in a duration that gives tok_s
    outcomes = [RequestOutcome(True, 8, 10, 0.01, 0.1, [0.01] * 9) for _ in range(4)]
    return summarize(config, outcomes, duration=40 / tok_s)


def test_kimi_reference_box_baselines_are_the_profile() -> None:
    bench = load_catalog()["kimi-k2.5-int4"].bench
    assert bench is not None
    assert bench.baselines == {1: 82.5, 128: 1536.0}
    assert (bench.input_len, bench.output_len, bench.tolerance) == (1024, 512, 0.10)


def test_gate_passes_at_the_floor_and_fails_just_below() -> None:
    bench = BenchProfile(input_len=8, output_len=10, tolerance=0.1, baselines={1: 100.0})
    assert throughput_gate([level(1, 90.0)], bench)[0].ok
    line = throughput_gate([level(1, 89.0)], bench)[0]
    assert not line.ok
    assert "89.0 output tok/s vs baseline 100.0 (floor 90.0" in line.text()
    assert "BELOW BASELINE" in line.text()


def test_gate_fails_a_concurrency_that_was_not_measured() -> None:
    bench = BenchProfile(input_len=8, output_len=10, tolerance=0.1, baselines={1: 10, 8: 10})
    lines = throughput_gate([level(1, 50.0)], bench)
    assert [line.ok for line in lines] == [True, False]


def test_unreachable_baseline_fails_with_both_numbers() -> None:
    bench = BenchProfile(input_len=8, output_len=10, tolerance=0.5, baselines={1: 1e6})
    line = throughput_gate([level(1, 250.0)], bench)[0]
    assert not line.ok and "250.0" in line.text() and "1000000.0" in line.text()


def test_draft_ab_fails_a_slower_draft_and_allows_noise() -> None:
    lines = draft_ab(
        [level(1, 70.0), level(8, 340.0)],
        [level(1, 250.0), level(8, 740.0)],
        [1, 8],
        ab_tolerance=0.3,
    )
    assert [line.ok for line in lines] == [False, False]
    assert "with draft 70.0 tok/s, without 250.0 tok/s" in lines[0].text()
    assert "FAIL" in lines[0].text()
    noisy = draft_ab([level(1, 230.0)], [level(1, 250.0)], [1], ab_tolerance=0.3)[0]
    assert noisy.ok and "within the 30% noise allowance" in noisy.text()
    strict = draft_ab([level(1, 230.0)], [level(1, 250.0)], [1], ab_tolerance=0.0)[0]
    assert not strict.ok


def test_summary_uses_vllm_bench_serve_definitions() -> None:
    config = RunConfig("http://x", "m", 100, 11, 2, 2, 0, 0)
    outcomes = [
        RequestOutcome(True, 100, 11, ttft_s=0.1, e2el_s=1.1, itl_s=[0.1] * 10),
        RequestOutcome(True, 100, 11, ttft_s=0.3, e2el_s=2.3, itl_s=[0.2] * 10),
        RequestOutcome(False, 100, error="HTTP 500"),
    ]
    r = summarize(config, outcomes, duration=2.5)
    assert (r.completed, r.failed) == (2, 1)
    assert r.output_throughput == pytest.approx(22 / 2.5)
    assert r.total_token_throughput == pytest.approx(222 / 2.5)
    assert r.request_throughput == pytest.approx(2 / 2.5)
    assert r.mean_ttft_ms == pytest.approx(200)
    assert r.mean_tpot_ms == pytest.approx((100 + 200) / 2)  # (e2el - ttft) / (n - 1)
    data = r.to_json()
    for key in (
        "completed",
        "request_throughput",
        "output_throughput",
        "total_token_throughput",
        "median_ttft_ms",
        "p99_tpot_ms",
        "mean_itl_ms",
        "p99_e2el_ms",
        "max_concurrency",
        "num_prompts",
    ):
        assert key in data
    assert data["errors"] == ["HTTP 500"]


def test_percentile_interpolates_like_numpy() -> None:
    assert percentile([1, 2, 3, 4], 50) == pytest.approx(2.5)
    assert percentile([1, 2, 3, 4], 99) == pytest.approx(3.97)
    assert percentile([], 99) == 0.0


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   \n",
        "!!!!!!!!!!!!!!!!",
        "????",
        "the cat the cat the cat the cat",
        "ualualualualualualualualualual",
        "Paris Paris Paris Paris",
    ],
)
def test_degenerate_output_is_caught(text: str) -> None:
    assert degenerate_reason(text) is not None


@pytest.mark.parametrize(
    "text",
    [
        " Paris.",
        "4",
        " 144",
        "The capital of France is Paris. It is on the Seine.",
        "1, 2, 3, 4, 5, 6",
        "ha ha ha",
    ],
)
def test_healthy_output_passes(text: str) -> None:
    assert degenerate_reason(text) is None


def test_judge_names_the_prompt_that_returned_bangs() -> None:
    completions = [
        Completion("The capital of France is", " Paris.", [1], [2]),
        Completion("The chemical symbol for gold is", "!!!!!!!!!!!!", [1], [2]),
    ]
    golden = {"The capital of France is": "Paris", "The chemical symbol for gold is": "Au"}
    verdict = judge(completions, golden, degenerate_check=True, reference=None)
    assert not verdict.ok
    text = "\n".join(verdict.lines)
    assert "FAIL 'The chemical symbol for gold is'" in text
    assert "one character repeated" in text and "expected 'Au'" in text
    assert "1/2 golden answers found" in text


def test_judge_fails_tokens_far_from_the_reference_argmax() -> None:
    completions = [Completion("p", "x", [1], [2, 3]), Completion("q", "y", [1], [4])]
    near_tie = [
        {"tokens": 2, "exact": True, "first_mismatch": None, "max_gap": 0.0, "ok": True},
        {"tokens": 1, "exact": False, "first_mismatch": 0, "max_gap": 0.001, "ok": True},
    ]
    ok = judge(completions, {}, degenerate_check=False, reference=near_tie)
    assert ok.ok and "1/2 completions token-identical" in ok.lines[-1]
    wrong = [dict(near_tie[0]), {**near_tie[1], "max_gap": 0.9, "ok": False}]
    bad = judge(completions, {}, degenerate_check=False, reference=wrong)
    assert not bad.ok
    assert "differs from transformers greedy at token 0 (logit gap 0.900" in bad.lines[0]
