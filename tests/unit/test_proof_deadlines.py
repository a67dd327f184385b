"""Every proof that waits on the server has a deadline derived from the profile and says what
it waits on: the formulas (proofs/deadlines.py), the correctness probe against a real slow
server on 127.0.0.1, and the gate's detached sweep under a real shell."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from llmhost.bench.guest_bench import (
    GuestBench,
    parse_state,
    poll_command,
    start_command,
    stop_command,
)
from llmhost.catalog import BenchProfile, CorrectnessProfile, load_catalog
from llmhost.endpoint import Endpoint
from llmhost.proofs import deadlines, sweep
from llmhost.proofs.base import ProofFailed
from llmhost.proofs.correct import CorrectnessCheck
from llmhost.proofs.deadlines import LIMITS, Limits
from llmhost.proofs.sweep import BenchRun
from tests.helpers import FakeVLLM

TINY = BenchProfile(
    input_len=128, output_len=128, tolerance=0.15, baselines={1: 60.0, 8: 250.0}, min_prompts=4
)


@pytest.mark.parametrize(
    ("bench", "max_tokens", "requests", "floor", "request_s", "deadline_s"),
    [
        # tiny-llama: 60 tok/s at c=1 less 15%: starved below 5.1; 8 x 32 tokens = 50 s -> 120
        (TINY, 32, 8, 51.0, 60.0, 120.0),
        # the same under the drill's 6 rounds of 4 prompts: 768 tokens at 5.1 tok/s
        (TINY, 32, 24, 51.0, 60.0, 768 / 5.1),
        # no gate (minimax): 10 tok/s a stream, starved below 1: 3 x 48 tokens
        (None, 48, 3, 10.0, 60.0, 144.0),
        # a long answer: its own timeout passes the minimum
        (None, 400, 1, 10.0, 400.0, 400.0),
        # per stream at the lowest concurrency: 80 tok/s over 4 streams, less 50%
        (BenchProfile(input_len=8, output_len=8, tolerance=0.5, baselines={4: 80.0}), 16, 2,
         10.0, 60.0, 120.0),
    ],
)  # fmt: skip
def test_the_correctness_deadline_is_its_tokens_at_a_tenth_of_the_floor(
    bench: BenchProfile | None,
    max_tokens: int,
    requests: int,
    floor: float,
    request_s: float,
    deadline_s: float,
) -> None:
    assert deadlines.stream_floor_tok_s(bench) == pytest.approx(floor)
    assert deadlines.starved_tok_s(bench) == pytest.approx(floor / 10)
    assert deadlines.request_timeout_s(max_tokens, bench) == pytest.approx(request_s)
    got = deadlines.correctness_deadline_s(requests, max_tokens, bench)
    assert got == pytest.approx(deadline_s)


def test_the_sweep_deadline_is_four_times_its_runs_at_the_floor_plus_warmup_and_start() -> None:
    # c=1: (4 + 2) x 128 / 51 + 5; c=8: (32 + 2) x 128 / 212.5 + 5; three rounds.
    one_round = (6 * 128 / 51 + 5) + (34 * 128 / 212.5 + 5)
    assert deadlines.sweep_at_floor_s(TINY, [1, 8]) == pytest.approx(3 * one_round)
    warm_run = 4 * ((8 + 2) * 128 / 212.5 + 5)  # the top level's wave, at 4x the floor
    assert deadlines.warmup_allowance_s(TINY, [1, 8]) == pytest.approx(6 * warm_run)
    expected = 60 + 6 * warm_run + 4 * 3 * one_round
    assert deadlines.sweep_deadline_s(TINY, [1, 8]) == pytest.approx(expected)
    # The warm-up's cap in seconds ends it first when its runs are long.
    capped = TINY.model_copy(update={"warmup_max_s": 10})
    assert deadlines.warmup_allowance_s(capped, [1, 8]) == pytest.approx(10 + warm_run)
    # No warm-up, one short run: the minimum.
    short = TINY.model_copy(update={"warmup_max_runs": 0, "runs": 1, "output_len": 1})
    assert deadlines.sweep_deadline_s(short, [1, 8]) == LIMITS.sweep_min_s


def test_every_gated_catalog_profile_gets_a_finite_deadline_within_two_hours() -> None:
    for name, profile in load_catalog(("testbed",)).items():
        if profile.bench is None:
            continue
        levels = sorted(profile.bench.baselines)
        deadline = deadlines.sweep_deadline_s(profile.bench, levels)
        assert LIMITS.sweep_min_s <= deadline < 7200, (name, deadline)


# --- the correctness probe against a real server that answers slowly ---------------------

# 100 tok/s a stream, starved below 10: one token may take 0.3 s, the probe 0.8 s.
FAST = Limits(
    request_min_s=0.3, correctness_min_s=0.8, progress_every_s=0.1, fallback_floor_tok_s=100
)


def probe(url: str, limits: Limits = FAST, rounds: int = 2) -> tuple[CorrectnessCheck, list]:
    lines: list[tuple[float, str]] = []
    check = CorrectnessCheck(
        endpoint=Endpoint(url, "m"),
        model="starved",
        correctness=CorrectnessProfile(
            prompts=("one", "two", "three"),
            degenerate_check=False,
            max_tokens=1,
            under_traffic_rounds=rounds,
        ),
        model_dir="/unused",
        python="/unused",
        refcheck="/unused",
        log=lambda line: lines.append((time.monotonic(), line)),
        limits=limits,
    )
    return check, lines


def failed_probe(
    answer_after_s: float, proof: Callable[[CorrectnessCheck], object]
) -> tuple[str, float, list[tuple[float, str]], float]:
    """A probe of a server answering each request after `answer_after_s`, which must fail:
    (its message, how long it took, its progress lines, when it started)."""
    with FakeVLLM(answer_after_s=answer_after_s) as slow:
        check, lines = probe(slow.url)
        start = time.monotonic()
        with pytest.raises(ProofFailed) as failed:
            proof(check)
        took = time.monotonic() - start
    return str(failed.value), took, lines, start


def test_a_starved_server_fails_the_probe_at_its_deadline_with_the_numbers() -> None:
    # Each answer would take 0.35 s: past a request's 0.3 s.
    message, took, lines, _ = failed_probe(0.35, CorrectnessCheck.run)
    assert took < 1.5
    assert message.startswith("correctness of starved FAILED: no answer to prompt 1 of 3")
    assert "(its request timeout)" in message
    assert "s of its 1 s deadline (3 requests at 10.0 tok/s" in message
    assert "none answered yet" in message
    # Progress while it waited, at least every 0.1 s (the 15 s of production, scaled).
    assert lines and all("waiting on prompt 1 of 3 ('one')" in line for _, line in lines)


def test_under_traffic_the_deadline_ends_the_probe_and_counts_what_answered() -> None:
    message, took, lines, start = failed_probe(0.2, CorrectnessCheck.run_under_traffic)
    # 6 requests of 0.2 s each (the side request shares the server): the 0.8 s deadline ends it.
    assert took < 2.0
    assert message.startswith("correctness of starved under traffic FAILED: no answer to prompt")
    assert "(the probe's deadline)" in message or "deadline passed before" in message
    assert "of 6 answered, " in message and " tok/s (starved below 10.0)" in message
    assert "side requests: " in message
    stamps = [start] + [t for t, _ in lines]
    assert max(b - a for a, b in zip(stamps, stamps[1:], strict=False)) < 0.35
    assert any(", round 1)" in line for _, line in lines)


def test_a_server_within_its_deadline_passes_and_prints_its_progress() -> None:
    with FakeVLLM(answer_after_s=0.15) as slow:
        roomy = Limits(request_min_s=1, correctness_min_s=2, progress_every_s=0.1)
        check, lines = probe(slow.url, roomy)
        verdict = check.run()
    assert verdict.passed
    assert any("1 of 3 answered, 1 tokens at " in line for _, line in lines)


# --- the gate's sweep, detached on the guest and polled ----------------------------------

FAKE_BENCH = """#!/bin/sh
# Stands in for bench_levels.py: a warm-up run, one measured run, then $SLEEP seconds.
echo 'LLMHOST-WARMUP {"run": 1, "output_throughput": 0.6}'
echo 'LLMHOST-BENCH {"max_concurrency": 1, "repeat": 0, "result": {"output_throughput": 0.6}}'
sleep "$SLEEP"
"""


def local_shell(command: str) -> tuple[bool, str, str]:
    done = subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=20)
    return done.returncode == 0, done.stdout, done.stderr


def fake_guest(tmp_path: Path, sleep_s: float) -> GuestBench:
    script = tmp_path / "bench_levels.sh"
    script.write_text(FAKE_BENCH)
    return GuestBench(
        "/bin/sh", str(script), None, 8000, "/w", str(tmp_path / "env"), env=(f"SLEEP={sleep_s}",)
    )


def test_a_detached_sweep_is_stopped_at_its_deadline_and_says_so(tmp_path: Path) -> None:
    prefix = str(tmp_path / "sweep")
    guest = fake_guest(tmp_path, 30)
    ok, _, err = local_shell(start_command(guest, TINY, "m", [1], prefix, 1))
    assert ok, err
    states = []
    for _ in range(40):
        ok, out, _ = local_shell(poll_command(prefix))
        states.append(parse_state(out))
        if states[-1][0] == "done":
            break
        time.sleep(0.1)
    assert states[-1] == ("done", 124)  # timeout's status: the deadline ended it
    assert ("running", None) in states
    assert "LLMHOST-BENCH " in out


SPAWNING_BENCH = """#!/bin/sh
# A benchmark that starts a child of its own, as bench_levels.py starts `vllm bench serve`.
sleep "$SLEEP" &
wait
"""


def left_running(marker: str) -> str:
    return subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True).stdout


@pytest.mark.parametrize("how", ["stopped", "deadline"])
def test_nothing_of_a_detached_sweep_is_left_once_stopped_or_at_its_deadline(
    tmp_path: Path, how: str
) -> None:
    """Ctrl-C's stop_command reads the pid file's process group: the sweep's `timeout` and
    the benchmark's own children must be in it (plain `timeout` moves to a group of its own,
    and they ran on for the deadline); at the deadline the sh ends them itself."""
    prefix = str(tmp_path / "sweep")
    marker = f"{47.1 if how == 'stopped' else 47.2}{os.getpid()}"  # a sleep only this test runs
    script = tmp_path / "bench_levels.sh"
    script.write_text(SPAWNING_BENCH)
    guest = GuestBench("/bin/sh", str(script), None, 8000, "/w", str(tmp_path / "env"),
                       env=(f"SLEEP={marker}",))  # fmt: skip
    deadline = 60 if how == "stopped" else 1
    ok, _, err = local_shell(start_command(guest, TINY, "m", [1], prefix, deadline))
    assert ok, err
    for _ in range(50):
        if left_running(marker):
            break
        time.sleep(0.1)
    assert left_running(marker)
    if how == "stopped":
        local_shell(stop_command(prefix))
    end = time.monotonic() + 10
    while left_running(marker) and time.monotonic() < end:
        time.sleep(0.1)
    assert left_running(marker) == ""
    if how == "deadline":
        assert parse_state(local_shell(poll_command(prefix))[1]) == ("done", 124)


def test_the_sweep_prints_progress_and_returns_its_lines_when_done(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sweep, "POLL_EVERY_S", 0.1)
    monkeypatch.setattr(deadlines, "LIMITS", Limits(progress_every_s=0.2))
    said: list[str] = []
    run = BenchRun(
        Endpoint("http://127.0.0.1:9", "m"),
        "m",
        TINY.model_copy(update={"runs": 1}),
        {"host": "h"},
        str(tmp_path),
        guest=fake_guest(tmp_path, 0.7),
        shell=local_shell,
        log=said.append,
    )
    out = sweep.poll_sweep(run, str(tmp_path / "sweep"))
    assert "LLMHOST-BENCH " in out
    assert said[0].startswith("benchmark m: started on the guest, its ")
    progress = [line for line in said if " s of its " in line and "on the guest:" in line]
    assert progress, said
    assert "warm-up runs: 0.6 tok/s; 1 of 2 measured runs done (c=1: 0.6 tok/s)" in progress[-1]
