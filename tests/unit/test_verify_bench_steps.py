"""The load proofs hand one sweep on: gate, then the draft A/B against it, then the verdict.

The proofs (llmhost/proofs) run for real, without pyinfra, on stand-in sweeps."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
from pydantic import SecretStr

from llmhost.bench import gates
from llmhost.bench.cadence import LoadProofs
from llmhost.bench.gates import GateLine
from llmhost.bench.result import RequestOutcome, RunConfig, summarize
from llmhost.bench.spec_metrics import SpecCounters
from llmhost.catalog import BenchProfile
from llmhost.endpoint import Endpoint
from llmhost.proofs import draft_ab, gate
from llmhost.proofs.base import ProofFailed, Verdict
from llmhost.proofs.gate import BenchOutcome
from llmhost.proofs.load import DraftAB, PassRecord, run_load_proofs, wanted
from llmhost.proofs.sweep import BenchRun

# confirm off: one sweep per gate here (the confirmation has its own tests below).
BENCH = BenchProfile(
    input_len=8, output_len=10, tolerance=0.1, baselines={1: 100.0, 8: 300.0}, confirm=False
)


def level(conc: int, tok_s: float) -> object:
    config = RunConfig("http://x", "m", 8, 10, conc, 4, 0, 0)
    outcomes = [RequestOutcome(True, 8, 10, 0.01, 0.1, [0.01] * 9) for _ in range(4)]
    return summarize(config, outcomes, duration=40 / tok_s)


class Guest:
    """Stands in for the server: one sweep result per call, spec counters, printed lines."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, sweeps: list[list[object]]) -> None:
        self.said: list[str] = []
        self.waits: list[dict] = []  # wait_ready's keyword arguments and headers, per wait
        self.sweeps = sweeps
        self.swept = 0
        self.counters = iter([SpecCounters(10, 30, 15), SpecCounters(20, 60, 45)])
        self.commands: list[str] = []
        monkeypatch.setattr(gate, "fetch_spec_counters", lambda url: next(self.counters))
        monkeypatch.setattr(gate, "run_sweep", self.sweep)
        monkeypatch.setattr(draft_ab, "run_sweep", self.sweep)
        ready = SimpleNamespace(ready=True)
        monkeypatch.setattr(
            Endpoint,
            "wait_ready",
            lambda at, *a, **k: (self.waits.append(k | {"headers": at.headers()}), ready)[1],
        )

    def sweep(self, run: BenchRun) -> list[object]:
        self.swept += 1
        return self.sweeps.pop(0)


def bench_run(
    guest: Guest,
    results_dir: str = "results",
    api_key: SecretStr | None = None,
    bench: BenchProfile = BENCH,
) -> BenchRun:
    labels = {"host": "10.99.0.12", "model_profile": "tiny"}
    return BenchRun(
        Endpoint("http://g:8000", "tiny", api_key),
        "tiny",
        bench,
        labels,
        results_dir,
        shell=lambda c: (guest.commands.append(c), (True, "", ""))[1],
        log=guest.said.append,
    )


RUN = LoadProofs(True, "the unit (re)started in this run")


def steps(run: BenchRun, gate_on: bool, mode: str, record: bool = False) -> Verdict:
    ab = DraftAB("u.service", "u-nodraft.service", mode, 0.1, 60)
    last = (
        PassRecord("/opt/llmhost/state/u.last-gate", lambda now: f"echo exported {now}")
        if record
        else None
    )
    return run_load_proofs(run, gate_on, RUN, ab, last)


def test_a_failed_gate_still_runs_the_ab_on_the_same_sweep_and_saves_every_verdict(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    guest = Guest(
        monkeypatch, [[level(1, 50.0), level(8, 400.0)], [level(1, 100.0), level(8, 200.0)]]
    )
    with pytest.raises(ProofFailed) as failed:
        steps(bench_run(guest), gate_on=True, mode="always")
    assert guest.swept == 2  # one with-draft sweep for the gate and the A/B, one without
    message = str(failed.value)
    assert message.startswith("throughput below baseline for tiny:\n  c=1: 50.0 output tok/s")
    # The failure carries the proof's verdict, read-only.
    verdict = failed.value.verdict
    assert verdict is not None and not verdict.passed and verdict.subject == "tiny"
    assert "\n".join(verdict.lines) == message and verdict.figures["gate"]
    with pytest.raises(TypeError):
        verdict.figures["gate"] = "passed"  # type: ignore[index]
    assert "\nthe draft of tiny does not pay:\n  c=1: with draft 50.0 tok/s" in message
    assert any(s.startswith("speculative decoding tiny: acceptance 100.0%") for s in guest.said)
    assert any(s.startswith("draft A/B tiny c=8: with draft 400.0 tok/s") for s in guest.said)
    shown = [s for s in guest.said if s.startswith("benchmark results: ")]
    assert shown and shown[0].startswith("benchmark results: results/10.99.0.12/")
    saved = sorted((tmp_path / "results/10.99.0.12").glob("*.json"))
    assert [p.name.split("-", 1)[1] for p in saved] in (
        ["tiny-gate.json", "tiny-without-draft.json"],
        ["tiny-without-draft.json", "tiny-gate.json"],
    )
    gate = json.loads(next(p for p in saved if p.name.endswith("-gate.json")).read_text())
    assert list(gate["verdicts"]) == ["gate", "baseline", "spec_decode", "draft_ab"]
    assert [v["ok"] for v in gate["verdicts"]["draft_ab"]] == [False, True]


def test_the_ab_follows_the_cadence_and_never_means_never(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    skip = LoadProofs(False, "nothing changed")
    on_change = DraftAB("u.service", "u-nodraft.service", "on-change", 0.1, 60)
    assert not wanted(skip, on_change) and not wanted(skip, None)
    assert wanted(skip, DraftAB("u.service", "u-nodraft.service", "always", 0.1, 60))
    guest = Guest(monkeypatch, [[level(1, 100.0), level(8, 300.0)]])
    run = bench_run(guest, str(tmp_path / "abs"))
    outcome = steps(run, gate_on=False, mode="never", record=True)
    assert guest.swept == 1
    assert outcome.figures["gate"] == "off" and outcome.passed
    assert "draft A/B for tiny skipped: verify.draft_ab = never" in guest.said
    assert any(s.startswith("throughput (not gated) c=1: 100.0") for s in guest.said)
    assert f"benchmark results: {tmp_path}/abs/10.99.0.12/" in next(
        s for s in guest.said if s.startswith("benchmark results: ")
    )
    # The pass is recorded on the guest, through the shell the proofs were given.
    [command] = guest.commands
    assert command.startswith("printf '%s\\n' ") and "> /opt/llmhost/state/u.last-gate" in command


def test_the_ab_waits_for_both_units_with_the_key_and_saves_no_key(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    key = "sk-ab-wait-key-0123456789"
    guest = Guest(
        monkeypatch, [[level(1, 100.0), level(8, 300.0)], [level(1, 90.0), level(8, 290.0)]]
    )
    steps(bench_run(guest, str(tmp_path), SecretStr(key)), gate_on=True, mode="always")
    assert [w["headers"] for w in guest.waits] == [{"Authorization": f"Bearer {key}"}] * 2
    saved = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert saved and not [p for p in saved if key.encode() in p.read_bytes()]
    assert key not in "\n".join(guest.said)


# One measured run a sweep, as the fake sweeps below give (`level`).
CONFIRMED = BENCH.model_copy(
    update={"confirm": True, "confirm_after_s": 0, "confirm_sweeps": 1, "runs": 1}
)


def test_a_gate_below_its_floor_measures_again_and_a_burst_is_outvoted(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    twice = CONFIRMED.model_copy(update={"confirm_sweeps": 2})
    burst, quiet = [level(1, 50.0), level(8, 400.0)], [level(1, 100.0), level(8, 310.0)]
    guest = Guest(monkeypatch, [burst, quiet, [level(1, 98.0), level(8, 305.0)]])
    outcome = BenchOutcome()
    gate.measure(bench_run(guest, bench=twice), True, outcome)
    # Two sweeps' runs (50 and 100) are not a majority yet: a third sweep is measured.
    assert guest.swept == 3 and not outcome.failures
    assert any("(2 of 2)" in s for s in guest.said)
    # The median of every run: c=1 of 50, 100, 98; c=8 of 400, 310, 305.
    assert [round(r.output_throughput) for r in outcome.results] == [98, 310]
    assert outcome.results[0].runs_output_throughput == [50.0, 100.0, 98.0]
    confirmation = outcome.verdicts["confirmation"]
    assert confirmation["first_sweep"] == {1: 50.0, 8: 400.0}
    assert confirmation["confirming_sweeps"] == 2


def test_a_regression_fails_every_sweep_and_one_sweep_reading_high_does_not_pass_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    twice = CONFIRMED.model_copy(update={"confirm_sweeps": 2})
    # 80% of the server, and one sweep of the three at 95%: the better sweep alone would
    # pass it, the median of its runs does not.
    slow = [
        [level(1, 80.0), level(8, 240.0)],
        [level(1, 95.0), level(8, 285.0)],
        [level(1, 81.0), level(8, 243.0)],
    ]
    guest = Guest(monkeypatch, slow)
    outcome = BenchOutcome()
    gate.measure(bench_run(guest, bench=twice), True, outcome)
    assert guest.swept == 3  # no fourth: confirm_sweeps caps it
    assert outcome.failures and "c=1: 81.0 output tok/s" in outcome.failures[0]


def runs(conc: int, *tok_s: float) -> object:
    """A level measured len(tok_s) times: their median is its figure, as a sweep records it."""
    result = level(conc, sorted(tok_s)[(len(tok_s) - 1) // 2])
    result.runs_output_throughput = list(tok_s)
    return result


def test_a_regression_below_its_floor_in_most_runs_takes_no_sweep_that_cannot_change_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    twice = CONFIRMED.model_copy(update={"confirm_sweeps": 2, "runs": 3})
    # Three runs a sweep, three sweeps at most: nine runs, whose median is the fifth. After
    # two sweeps six of them are below c=1's floor (90): the third sweep cannot lift it.
    slow = [runs(1, 80.0, 81.0, 79.0), runs(8, 310.0, 300.0, 305.0)]
    guest = Guest(monkeypatch, [slow, slow, slow])
    outcome = BenchOutcome()
    gate.measure(bench_run(guest, bench=twice), True, outcome)
    assert guest.swept == 2 and outcome.failures
    assert any("no further sweep can lift the median" in s for s in guest.said), guest.said
    # Four of six below is no majority of nine yet: the third sweep is measured.
    top = runs(8, 310.0, 300.0, 305.0)
    sweeps = [[runs(1, *x), top] for x in ((80.0, 81.0, 79.0), (80.0, 95.0, 96.0), (95, 96, 97))]
    guest = Guest(monkeypatch, sweeps)
    outcome = BenchOutcome()
    gate.measure(bench_run(guest, bench=twice), True, outcome)
    assert guest.swept == 3 and not outcome.failures  # the fifth of nine: 95


def test_one_confirming_sweep_cannot_outvote_a_sweep_all_below_so_none_is_measured(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    guest = Guest(
        monkeypatch, [[level(1, 50.0), level(8, 400.0)], [level(1, 100.0), level(8, 310.0)]]
    )
    outcome = BenchOutcome()
    gate.measure(bench_run(guest, bench=CONFIRMED), True, outcome)
    # The lower middle of two runs, as median_run takes it: one good sweep is no majority,
    # so the one confirming sweep allowed could not change the verdict and is not measured.
    assert guest.swept == 1 and outcome.failures
    assert [round(r.output_throughput) for r in outcome.results] == [50, 400]


def test_a_sweep_above_its_floors_measures_once(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    guest = Guest(monkeypatch, [[level(1, 100.0), level(8, 310.0)]])
    outcome = BenchOutcome()
    gate.measure(
        bench_run(guest, bench=CONFIRMED.model_copy(update={"confirm_sweeps": 3})), True, outcome
    )
    assert guest.swept == 1 and "confirmation" not in outcome.verdicts


def test_an_ab_pair_hit_by_load_is_measured_again_and_a_draft_that_does_not_pay_fails_twice(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    with_draft, loaded_without = (
        [level(1, 100.0), level(8, 300.0)],
        [level(1, 200.0), level(8, 290.0)],
    )
    again = [[level(1, 100.0), level(8, 300.0)], [level(1, 105.0), level(8, 300.0)]]
    guest = Guest(monkeypatch, [with_draft, loaded_without, *again])
    outcome = steps(bench_run(guest, bench=CONFIRMED), gate_on=False, mode="always")
    assert guest.swept == 4 and outcome.passed
    assert any("measuring the pair once more" in s for s in guest.said)
    assert [round(v["ratio"], 2) for v in outcome.figures["draft_ab"]] == [0.95, 1.03]
    assert [round(v["ratio"], 2) for v in outcome.figures["draft_ab_first_pair"]] == [0.5, 1.03]
    assert len(guest.waits) == 4  # two swaps, each waits for both units

    slow = [level(1, 50.0), level(8, 300.0)]
    without = [level(1, 100.0), level(8, 300.0)]
    guest = Guest(monkeypatch, [slow, without, slow, without])
    with pytest.raises(ProofFailed, match="the draft of tiny does not pay"):
        steps(bench_run(guest, bench=CONFIRMED), gate_on=False, mode="always")
    assert guest.swept == 4


def test_a_switch_whose_draft_fails_its_ab_does_not_load_the_draft_again_before_the_rollback(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    slow, without = [level(1, 50.0), level(8, 150.0)], [level(1, 100.0), level(8, 300.0)]
    ab = DraftAB("u.service", "u-nodraft.service", "always", 0.1, 60)
    # A switch (the guard is armed): the reference keeps serving until the rollback stops
    # it (switch/guard.py); u.service is not started again.
    guest = Guest(monkeypatch, [slow, without])
    with pytest.raises(ProofFailed, match="the draft of tiny does not pay"):
        run_load_proofs(bench_run(guest), False, RUN, ab, rolls_back=lambda: True)
    assert guest.commands == ["systemctl stop u.service && systemctl start u-nodraft.service"]
    assert len(guest.waits) == 1  # the reference's readiness only
    assert any("u-nodraft.service keeps serving and u.service stays" in s for s in guest.said)
    # With a confirming pair: the draft is measured first, the reference last, and the
    # draft is not loaded again after the verdict either.
    confirming = bench_run(guest := Guest(monkeypatch, [slow, without, slow, without]))
    confirming = replace(confirming, bench=CONFIRMED)
    with pytest.raises(ProofFailed, match="the draft of tiny does not pay"):
        run_load_proofs(confirming, False, RUN, ab, rolls_back=lambda: True)
    assert guest.swept == 4 and len(guest.waits) == 3  # twin, draft, twin
    assert "systemctl start u-nodraft.service" in guest.commands[-1]
    # The same verdict outside a switch: the draft's unit serves again.
    guest = Guest(monkeypatch, [slow, without])
    with pytest.raises(ProofFailed, match="the draft of tiny does not pay"):
        run_load_proofs(bench_run(guest), False, RUN, ab, rolls_back=lambda: False)
    assert "systemctl start u.service" in guest.commands[-1] and len(guest.waits) == 2
    # A draft that pays, in a switch: served again, as always.
    guest = Guest(monkeypatch, [without, without])
    run_load_proofs(bench_run(guest), False, RUN, ab, rolls_back=lambda: True)
    assert "systemctl start u.service" in guest.commands[-1] and len(guest.waits) == 2


def test_a_floor_that_could_still_drop_with_more_scatter_is_not_settled_early() -> None:
    # A host baseline's margin grows with the judged runs' scatter, up to the tolerance: six
    # runs at 92-93 below today's floor (93.95) are not settled while a third sweep could
    # widen the margin and pass them (floor 92.2); a 25% regression is below any floor.
    line = GateLine(
        1, 92.5, 100.0, 93.95, "host baseline", 100.0, 50.0, 0.06, runs=(92.0, 92.5, 93.0) * 2
    )
    assert gates.lowest_floor(line, 0.2) == 80.0
    assert not gates.failure_settled(line, 3, 3, 0.2)
    low = replace(line, measured=75.0, runs=(75.0, 74.0, 76.0) * 2)
    assert gates.failure_settled(low, 3, 3, 0.2)
    # A catalog floor does not move: five of nine below it settle the level.
    catalog = GateLine(1, 80.0, 100.0, 90.0, runs=(80.0, 81.0, 79.0, 85.0, 86.0))
    assert gates.lowest_floor(catalog, 0.1) == 90.0 and gates.failure_settled(catalog, 3, 3, 0.1)
