"""The pure switching rules: which model serves, which served before, what a run switches."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from llmhost.naming import ab_unit_name, model_of_unit, unit_name, units_of
from llmhost.switch.guard import record_command, summary_lines
from llmhost.switch.plan import (
    Pending,
    ServingRecord,
    SwitchPlan,
    conflicts_with,
    failed_before,
    plan_switch,
    weights_to_prune,
)

A, B, C, Z = unit_name("a"), unit_name("b"), unit_name("c"), unit_name("z")
A_NODRAFT = ab_unit_name("a")


def plan(
    record: ServingRecord,
    target: str = "b",
    on_disk: list[str] | None = None,
    active: list[str] | None = None,
    co_served: set[str] | None = None,
    keep_previous: int = 1,
) -> SwitchPlan:
    return plan_switch(
        record, target, on_disk or [], active or [], co_served or set(), keep_previous
    )


# --- plan_switch ---------------------------------------------------------------------------


def test_a_fresh_guest_does_not_switch_and_records_the_target() -> None:
    p = plan(ServingRecord())
    assert p.source is None and not p.switching and not p.resumed
    assert p.committed == ServingRecord(current="b", previous=())
    assert p.retire_after == frozenset() and p.notes == ()


def test_a_rerun_of_the_served_model_changes_nothing() -> None:
    record = ServingRecord(current="b", previous=("a",))
    p = plan(record, on_disk=[A, B], active=[B])
    assert p.source is None and not p.switching
    assert p.committed.dump() == record.dump()
    assert p.retire_after == frozenset()
    assert {A, B} <= p.keep_now


def test_no_switch_still_trims_previous_to_keep_previous() -> None:
    p = plan(ServingRecord(current="b", previous=("a", "z")), on_disk=[A, B, Z])
    assert p.source is None
    assert p.committed.previous == ("a",)
    assert p.retire_after == {Z}


@pytest.mark.parametrize(
    ("keep_previous", "previous", "retired"),
    [(2, ("a", "z"), set()), (1, ("a",), {Z}), (0, (), {A, A_NODRAFT, Z})],
)
def test_a_switch_from_the_recorded_model_keeps_it_until_commit(
    keep_previous: int, previous: tuple[str, ...], retired: set[str]
) -> None:
    record = ServingRecord(current="a", previous=("z",))
    p = plan(record, on_disk=[A, A_NODRAFT, B, Z], active=[A], keep_previous=keep_previous)
    assert p.source == "a" and p.switching and not p.resumed
    assert {A, A_NODRAFT, B, Z} <= p.keep_now
    assert p.committed == ServingRecord(current="b", previous=previous)
    assert p.retire_after == retired
    assert p.earlier == ("z",)


def test_a_recorded_model_without_its_unit_on_disk_is_no_source() -> None:
    p = plan(ServingRecord(current="a"), on_disk=[B], active=[])
    assert p.source is None and not p.switching


def test_a_guest_from_before_the_record_switches_from_the_active_llmhost_unit() -> None:
    p = plan(ServingRecord(), on_disk=[A, B], active=["ssh.service", A, B])
    assert p.source == "a" and not p.resumed
    assert p.committed.previous == ("a",)


def test_nodraft_units_and_co_served_models_are_never_a_source() -> None:
    active = [A_NODRAFT, "llmhost-b-nodraft.service", C, B, "ssh.service"]
    p = plan(ServingRecord(), on_disk=[A_NODRAFT, B, C], active=active, co_served={"c"})
    assert p.source is None
    assert units_of("c") <= p.keep_now and C not in p.retire_after


def test_an_interrupted_switch_to_the_target_is_finished_with_rollback_armed() -> None:
    record = ServingRecord(pending=Pending("a", "b", 1764500000.0))
    p = plan(record, on_disk=[A, B], active=[])
    assert p.source == "a" and p.resumed and p.switching
    assert any("finishing it now" in n and "a -> b" in n for n in p.notes)
    assert A in p.keep_now
    assert p.committed == ServingRecord(current="b", previous=("a",))


def test_an_interrupted_switch_to_another_target_drops_the_unproven_model() -> None:
    record = ServingRecord(pending=Pending("a", "b", 1764500000.0))
    p = plan(record, target="c", on_disk=[A, B, C], active=[])
    assert p.source == "a" and p.resumed
    assert B not in p.keep_now and not units_of("b") & p.keep_now
    assert A in p.keep_now
    assert p.retire_now == {B}  # stopped and removed before the new model starts
    assert any("b never passed its proofs" in n for n in p.notes)


def test_an_interrupted_switch_back_to_its_source_is_no_switch() -> None:
    record = ServingRecord(pending=Pending("a", "b", 1764500000.0))
    p = plan(record, target="a", on_disk=[A, B], active=[])
    assert p.source is None and not p.resumed
    assert any("switch back to a" in n for n in p.notes)
    assert p.committed == ServingRecord(current="a", previous=())


def test_a_rollback_records_the_source_and_why_the_target_failed() -> None:
    p = plan(ServingRecord(current="a", previous=("z",)), on_disk=[A, B, Z])
    back = p.rolled_back("x" * 600, 1764500000.7)
    assert back.current == "a" and back.previous == ("z",) and back.pending is None
    assert back.failed == {"model": "b", "why": "x" * 500, "at": 1764500000}


def test_the_pending_record_has_no_current_model() -> None:
    p = plan(ServingRecord(current="a", previous=("z",)), on_disk=[A, B, Z])
    record = p.pending_record(1764500000.0)
    assert record == ServingRecord(
        current=None, previous=("z",), pending=Pending("a", "b", 1764500000.0)
    )


# --- the record ----------------------------------------------------------------------------


@pytest.mark.parametrize("text", [None, "", "{not json", "[1, 2]", '"a"'])
def test_an_absent_or_unreadable_record_is_empty(text: str | None) -> None:
    assert ServingRecord.parse(text) == ServingRecord()


def test_a_full_record_round_trips() -> None:
    record = ServingRecord(
        current=None,
        previous=("a", "z"),
        pending=Pending("a", "b", 1764500000.0),
        failed={"model": "c", "why": "gate", "at": 1764400000},
    )
    assert ServingRecord.parse(record.dump()) == record
    assert ServingRecord.parse(record.dump()).dump() == record.dump()
    assert json.loads(record.dump())["pending"] == {"from": "a", "to": "b", "since": 1764500000}


@pytest.mark.parametrize(
    ("unit", "model"),
    [("llmhost-x.service", "x"), ("llmhost-x-nodraft.service", None), ("ssh.service", None)],
)
def test_model_of_unit(unit: str, model: str | None) -> None:
    assert model_of_unit(unit) == model


def test_conflicts_cover_other_models_and_the_targets_ab_unit_only() -> None:
    got = conflicts_with("b", {"c"}, ["d", "a", "b", "c"])
    assert got == [
        A_NODRAFT,
        A,
        "llmhost-b-nodraft.service",
        "llmhost-d-nodraft.service",
        "llmhost-d.service",
    ]
    assert got == sorted(got) == conflicts_with("b", {"c"}, ["c", "b", "a", "d"])
    assert B not in got and not units_of("c") & set(got)


# --- the record on the guest and the switch summary ---------------------------------------


def test_record_command_writes_the_record_atomically(tmp_path: Path) -> None:
    path = tmp_path / "st ate" / "serving.json"
    record = ServingRecord(current="b", previous=("a",), failed={"model": "c", "why": "it's"})
    subprocess.run(["sh", "-c", record_command(str(path), record)], check=True)
    assert ServingRecord.parse(path.read_text()) == record
    assert not path.with_name("serving.json.tmp").exists()


def test_summary_lines() -> None:
    summary = {"from": "a", "to": "b", "staging_s": 12.4, "downtime_s": 3.04, "gate": "pass"}
    lines = summary_lines(summary)
    assert lines[1] == "SWITCH a -> b: done"
    assert "staging (while a served): 12s" in lines[2]
    assert lines[3].endswith("3.0s") and "gate: pass" in lines[4]
    assert summary_lines({**summary, "downtime_s": None})[3].endswith("not measured")


def test_only_weights_no_kept_model_uses_are_pruned() -> None:
    on_disk = ["tiny-llama", "tiny-eagle3", "tiny-llama.partial", "smollm2.partial"]
    assert weights_to_prune(on_disk, {"tiny-llama"}) == ["smollm2.partial", "tiny-eagle3"]


def test_a_target_that_failed_and_rolled_back_is_not_retried_by_itself() -> None:
    record = ServingRecord(
        current="a", failed={"model": "b", "why": "correctness FAILED", "at": 1764500000}
    )
    assert failed_before(record, "b") == (
        "b failed its proofs at 2025-11-30 10:53 UTC and was rolled back: correctness FAILED"
    )
    assert failed_before(record, "c") is None  # another target is a new switch
    assert failed_before(ServingRecord(current="b", failed=record.failed), "b") is None
