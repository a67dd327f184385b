"""Per-host throughput baselines: the floor is max(catalog, host) x (1 - tolerance)."""

from __future__ import annotations

import datetime as dt
import json
import os
from pathlib import Path

import pytest

from llmhost.bench import baselines
from llmhost.bench.baselines import (
    FIRST_PASS,
    REBASELINE,
    BaselineKey,
    HostBaseline,
    baseline_update,
    bench_settings,
    cpu_placement,
    effective_floors,
    load_host_baseline,
    record_baseline,
)
from llmhost.bench.gates import GateLine, measured_tok_s, throughput_gate
from llmhost.bench.result import LevelResult, RequestOutcome, RunConfig, summarize
from llmhost.catalog import BenchProfile, load_catalog

WHEN = dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.UTC)
# The margin pinned at the tolerance (min_tolerance = tolerance): the floor these tests
# describe is baseline x (1 - tolerance), whatever the spread; tests/unit/test_gate_floor.py
# covers the margin sized by the spread.
TINY = BenchProfile(
    input_len=128, output_len=128, tolerance=0.5, min_tolerance=0.5, baselines={1: 60.0, 8: 250.0}
)


def level(conc: int, tok_s: float) -> LevelResult:
    config = RunConfig("http://x", "m", 8, 10, conc, 4, 0, 0)
    outcomes = [RequestOutcome(True, 8, 10, 0.01, 0.1, [0.01] * 9) for _ in range(4)]
    return summarize(config, outcomes, duration=40 / tok_s)


def key(**changes: str) -> BaselineKey:
    fields = {
        "host": "10.99.0.12",
        "model_profile": "tiny-llama",
        "venv": "3f9a1c2b7d10",
        "driver": "",
        "settings": bench_settings(128, 128, [8, 1]),
    }
    return BaselineKey(**(fields | changes))


def host_baseline(figures: dict[int, float]) -> HostBaseline:
    return HostBaseline(key(), figures, WHEN.isoformat(timespec="seconds"), FIRST_PASS)


def test_settings_string_is_stable() -> None:
    assert bench_settings(128, 128, [8, 1, 8]) == "in128-out128-c1,8"
    assert key().id() == key().id()
    assert "driver none (CPU)" in key().describe()


def test_without_a_host_baseline_the_floor_is_the_catalogs() -> None:
    floors = effective_floors({1: 60.0, 8: 250.0}, None, 0.5)
    assert {c: (f.baseline, f.floor, f.source) for c, f in floors.items()} == {
        1: (60.0, 30.0, "catalog"),
        8: (250.0, 125.0, "catalog"),
    }


def test_floor_is_the_higher_of_catalog_and_host() -> None:
    floors = effective_floors({1: 60.0, 8: 250.0}, host_baseline({1: 612.3, 8: 200.0}), 0.5)
    assert (floors[1].baseline, floors[1].floor) == (612.3, pytest.approx(306.15))
    assert floors[1].source == "host baseline of 2026-11-30"
    assert (floors[1].catalog, floors[1].catalog_floor) == (60.0, 30.0)
    # The host is slower than the reference here: the catalog's figure stands.
    assert (floors[8].baseline, floors[8].floor, floors[8].source) == (250.0, 125.0, "catalog")
    assert floors[8].host == 200.0


def test_a_concurrency_the_host_baseline_lacks_uses_the_catalog() -> None:
    floors = effective_floors({1: 60.0, 8: 250.0}, host_baseline({1: 612.3, 16: 5000.0}), 0.5)
    assert floors[8].source == "catalog" and floors[8].floor == 125.0
    assert set(floors) == {1, 8}  # a host figure the catalog does not gate is ignored


def test_kimi_catalog_floors_when_the_host_is_the_reference_box() -> None:
    bench = load_catalog()["kimi-k2.5-int4"].bench
    assert bench is not None
    floors = effective_floors(bench.baselines, None, bench.tolerance)
    assert floors[1].floor == pytest.approx(82.5 * 0.9)
    assert floors[128].floor == pytest.approx(1536.0 * 0.9)


def test_gate_without_host_baseline_behaves_as_before() -> None:
    lines = throughput_gate([level(1, 600.0), level(8, 130.0)], TINY)
    assert [(line.floor, line.source, line.ok) for line in lines] == [
        (30.0, "catalog", True),
        (125.0, "catalog", True),
    ]


def test_drill_host_baseline_catches_what_the_catalog_floor_passes() -> None:
    host = host_baseline({1: 600.0, 8: 1000.0})
    results = [level(1, 600.0), level(8, 300.0)]
    catalog_only = throughput_gate(results, TINY)
    assert all(line.ok for line in catalog_only)  # 300 >= 250 x 0.5: a 3x loss passes
    line = throughput_gate(results, TINY, host)[1]
    assert (line.baseline, line.floor) == (1000.0, 500.0)
    assert not line.ok and line.catalog_ok
    assert baseline_update(host, passed_catalog=True, rebaseline=False) is None


def test_failing_line_names_measured_baseline_source_and_floor() -> None:
    line = throughput_gate([level(8, 240.1)], TINY, host_baseline({8: 1010.0}))[1]
    assert line.text() == (
        "c=8: 240.1 output tok/s vs baseline 1010.0 (floor 505.0 = baseline - 50.0%, scatter "
        "0.0%, 24% of baseline; host baseline of 2026-11-30, catalog 250.0) BELOW BASELINE"
    )
    catalog = throughput_gate([level(1, 20.0)], TINY)[0]
    assert catalog.text() == (
        "c=1: 20.0 output tok/s vs baseline 60.0 (floor 30.0 = baseline - 50.0%, 33% of "
        "baseline; catalog) BELOW BASELINE"
    )


def test_gate_line_fields_stay_readable_by_vars() -> None:
    line = throughput_gate([level(8, 600.0)], TINY, host_baseline({8: 1010.0}))[1]
    recorded = vars(line) | {"ok": line.ok}
    assert json.loads(json.dumps(recorded))["source"] == "host baseline of 2026-11-30"
    for name in ("concurrency", "measured", "baseline", "floor"):
        assert name in recorded
    assert GateLine(1, 5.0, 10.0, 5.0).source == "catalog"  # old positional form still works
    assert GateLine(1, 5.0, 10.0, 5.0).catalog_ok


def test_first_passing_run_records_and_a_failing_first_run_does_not() -> None:
    assert baseline_update(None, passed_catalog=True, rebaseline=False) == FIRST_PASS
    assert baseline_update(None, passed_catalog=True, rebaseline=True) == FIRST_PASS
    assert baseline_update(None, passed_catalog=False, rebaseline=False) is None
    assert baseline_update(None, passed_catalog=False, rebaseline=True) is None


def test_an_existing_baseline_changes_only_on_rebaseline_above_the_catalog_floor() -> None:
    host = host_baseline({1: 600.0, 8: 1000.0})
    assert baseline_update(host, passed_catalog=True, rebaseline=False) is None
    assert baseline_update(host, passed_catalog=False, rebaseline=True) is None
    # Below the host floor, above the catalog floor: a rebaseline accepts the change.
    line = throughput_gate([level(1, 600.0), level(8, 300.0)], TINY, host)
    passed_catalog = all(gl.catalog_ok for gl in line)
    assert not all(gl.ok for gl in line) and passed_catalog
    assert baseline_update(host, passed_catalog, rebaseline=True) == REBASELINE
    # Below the catalog floor too: no rebaseline can record it.
    line = throughput_gate([level(1, 600.0), level(8, 100.0)], TINY, host)
    assert baseline_update(host, all(gl.catalog_ok for gl in line), rebaseline=True) is None


def test_record_round_trips_and_the_next_load_sees_it(tmp_path: Path) -> None:
    assert load_host_baseline(tmp_path, key()) is None
    lines = throughput_gate([level(1, 612.3), level(8, 1010.0)], TINY)
    written = record_baseline(
        tmp_path, key(), measured_tok_s(lines), FIRST_PASS, "20261130T120000Z-tiny.json", WHEN
    )
    loaded = load_host_baseline(tmp_path, key())
    assert loaded == written
    assert loaded is not None
    assert loaded.baselines == {1: pytest.approx(612.3), 8: pytest.approx(1010.0)}
    assert (loaded.set_at, loaded.date) == ("2026-11-30T12:00:00+00:00", "2026-11-30")
    assert (loaded.reason, loaded.source_file) == (FIRST_PASS, "20261130T120000Z-tiny.json")
    stored = json.loads((tmp_path / "10.99.0.12" / "baselines.json").read_text())
    entry = stored[key().id()]
    assert entry["baselines"] == {"1": pytest.approx(612.3), "8": pytest.approx(1010.0)}
    assert entry["host"] == "10.99.0.12" and entry["driver"] == "" and entry["venv"]
    assert entry["reason"] == FIRST_PASS


def test_rebaseline_replaces_and_keeps_what_it_replaced(tmp_path: Path) -> None:
    record_baseline(tmp_path, key(), {8: 1000.0}, FIRST_PASS, "a.json", WHEN)
    later = WHEN + dt.timedelta(days=3)
    record_baseline(tmp_path, key(), {8: 300.0}, REBASELINE, "b.json", later)
    loaded = load_host_baseline(tmp_path, key())
    assert loaded is not None
    assert (loaded.baselines, loaded.reason, loaded.date) == ({8: 300.0}, REBASELINE, "2026-12-03")
    assert loaded.previous is not None and loaded.previous["baselines"] == {"8": 1000.0}


@pytest.mark.parametrize(
    "other",
    [
        key(venv="0000deadbeef"),
        key(driver="580.159.04"),
        key(settings=bench_settings(256, 128, [1, 8])),
        key(settings=bench_settings(128, 128, [1, 8, 32])),
        key(model_profile="smollm2-135m"),
        key(host="10.99.0.13"),
    ],
)
def test_keys_differing_in_any_field_do_not_share_a_baseline(
    tmp_path: Path, other: BaselineKey
) -> None:
    record_baseline(tmp_path, key(), {8: 1000.0}, FIRST_PASS, "a.json", WHEN)
    assert other.id() != key().id()
    assert load_host_baseline(tmp_path, other) is None
    record_baseline(tmp_path, other, {8: 50.0}, FIRST_PASS, "b.json", WHEN)
    mine = load_host_baseline(tmp_path, key())
    assert mine is not None and mine.baselines == {8: 1000.0}


def test_the_file_is_replaced_atomically(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    record_baseline(tmp_path, key(), {8: 1000.0}, FIRST_PASS, "a.json", WHEN)
    path = tmp_path / "10.99.0.12" / "baselines.json"
    before = path.read_text()
    replaced: list[tuple[str, str]] = []
    real_replace = os.replace

    def replace(src: str, dst: str) -> None:
        replaced.append((str(src), str(dst)))
        raise OSError("disk gone")

    monkeypatch.setattr(baselines.os, "replace", replace)
    with pytest.raises(OSError):
        record_baseline(tmp_path, key(), {8: 1.0}, REBASELINE, "b.json", WHEN)
    assert path.read_text() == before  # the old file is whole, never half-written
    assert [p.name for p in path.parent.iterdir()] == ["baselines.json"]  # no stray temp
    ((src, dst),) = replaced
    assert Path(src).parent == path.parent and dst == str(path)

    monkeypatch.setattr(baselines.os, "replace", real_replace)
    record_baseline(tmp_path, key(), {8: 1.0}, REBASELINE, "b.json", WHEN)
    loaded = load_host_baseline(tmp_path, key())
    assert loaded is not None and loaded.baselines == {8: 1.0}


def test_a_broken_file_is_an_error_not_a_missing_baseline(tmp_path: Path) -> None:
    directory = tmp_path / "10.99.0.12"
    directory.mkdir()
    (directory / "baselines.json").write_text("{ half")
    with pytest.raises(ValueError, match="not valid JSON"):
        load_host_baseline(tmp_path, key())


def test_a_cpu_guest_on_other_cores_has_a_baseline_of_its_own_and_gpu_keys_are_unchanged(
    tmp_path: Path,
) -> None:
    """The sandbox guest that gives core 1 to a second replica (inventory/sandbox.py) is not
    the machine its two-core baseline was set on: its gate must not judge it by that one."""
    two = key(placement=cpu_placement("0", "1"))
    one = key(placement=cpu_placement("0", None))
    assert two.id() != one.id() and one.id().endswith(";placement=engine 0, front end shared")
    record_baseline(tmp_path, two, {1: 500.0, 8: 3500.0}, FIRST_PASS)
    assert load_host_baseline(tmp_path, one) is None
    loaded = load_host_baseline(tmp_path, two)
    assert loaded is not None and loaded.baselines == {1: 500.0, 8: 3500.0}
    # A GPU guest's key has no placement: its id, and so its stored entries, stay as before.
    assert "placement" not in key().id() and "placement" not in key().fields()
