"""The switch engine without pyinfra: its stages in their one order, a rollback that serves
the old model again (a stand-in server) and writes the record through the shell it was
given, and what Ctrl-C prints at each stage."""

from __future__ import annotations

import time

import pytest

from llmhost.endpoint import Endpoint
from llmhost.naming import unit_name
from llmhost.proofs.base import ProofFailed
from llmhost.switch.guard import LAST_ANSWER_WITHIN_S, RollbackTarget, SwitchFailed, SwitchGuard
from llmhost.switch.plan import Pending, ServingRecord, plan_switch
from llmhost.switch.stages import NEXT, Stage
from tests.helpers import FakeVLLM


class Guest:
    """The shell a guard is handed: every command recorded, each answered `ok`."""

    def __init__(self, ok: bool = True) -> None:
        self.commands: list[str] = []
        self.ok = ok

    def __call__(self, command: str) -> tuple[bool, str, str]:
        self.commands.append(command)
        return self.ok, "", "" if self.ok else "Failed to start llmhost-a.service"


def guard(guest: Guest, url: str = "http://127.0.0.1:9", resumed: bool = False) -> SwitchGuard:
    record = (
        ServingRecord(pending=Pending("a", "b", 1.0)) if resumed else ServingRecord(current="a")
    )
    plan = plan_switch(record, "b", [unit_name("a")], [unit_name("a")], set(), 1)
    source = RollbackTarget("a", Endpoint(url, "m"), 5, check=None)
    return SwitchGuard(
        plan,
        "g1",
        "/opt/llmhost/state/serving.json",
        unit_name("b"),
        source,
        "true",
        "results",
        shell=guest,
        log=lambda line: None,
    )


def test_a_fresh_switch_goes_through_its_stages_in_order_and_no_other() -> None:
    g = guard(Guest())
    assert g.stage is Stage.STAGING and not g.armed()
    for stage in (Stage.STOPPING, Stage.STOPPED, Stage.STARTING, Stage.LOADING):
        g.enter(stage)
        assert g.armed()
    g.answered()
    assert g.stage is Stage.ANSWERS and g.first_answer is not None
    g.enter(Stage.COMMITTED)
    assert not g.armed()
    with pytest.raises(RuntimeError, match="committed cannot go to rolling back"):
        g.enter(Stage.ROLLING_BACK)


def test_a_stage_out_of_order_is_refused() -> None:
    g = guard(Guest())
    with pytest.raises(RuntimeError, match="staging cannot go to starting"):
        g.enter(Stage.STARTING)
    assert all(Stage.ROLLING_BACK not in NEXT[s] for s in (Stage.STAGING, Stage.COMMITTED))


def test_a_resumed_switch_starts_where_nothing_serves_and_is_armed() -> None:
    g = guard(Guest(), resumed=True)
    assert g.plan.resumed and g.stage is Stage.STOPPED and g.armed()
    assert "NOTHING SERVES" in (g.on_interrupt() or "")


def test_a_rollback_serves_the_old_model_again_and_records_it() -> None:
    guest = Guest()
    with FakeVLLM() as server:
        g = guard(guest, server.url)
        for stage in (Stage.STOPPING, Stage.STOPPED, Stage.STARTING, Stage.LOADING):
            g.enter(stage)
        with pytest.raises(SwitchFailed) as failed:
            g.roll_back(ProofFailed("correctness FAILED for b"))
    message = str(failed.value)
    assert message.startswith("switch a -> b FAILED: correctness FAILED for b\nROLLED BACK: a")
    assert g.stage is Stage.ROLLED_BACK and not g.armed()
    assert "systemctl disable --now llmhost-b.service" in guest.commands[0]
    assert "systemctl stop llmhost-b-nodraft.service" in guest.commands[0]  # an A/B twin
    assert "systemctl enable --now llmhost-a.service" in guest.commands[0]
    record = guest.commands[1]
    assert "serving.json.tmp" in record and '"failed"' in record and '"current": "a"' in record
    assert len(guest.commands) == 2  # no leftovers named, none removed


def test_a_rollback_removes_the_targets_leftovers_after_its_record_and_keeps_the_sources() -> None:
    guest = Guest()
    with FakeVLLM() as server:
        g = guard(guest, server.url)
        g.source_leftovers = ("/x/llmhost_gate_a.prom",)
        g.target_leftovers = ("/x/llmhost_gate_b.prom",)
        for stage in (Stage.STOPPING, Stage.STOPPED, Stage.STARTING, Stage.LOADING):
            g.enter(stage)
        with pytest.raises(SwitchFailed):
            g.roll_back(ProofFailed("correctness FAILED for b"))
    assert '"failed"' in guest.commands[1]
    assert guest.commands[2] == "rm -f /x/llmhost_gate_b.prom || true"
    assert not any("llmhost_gate_a" in c for c in guest.commands)


def test_a_rollback_that_cannot_start_the_old_model_says_where_the_guest_stands() -> None:
    g = guard(Guest(ok=False))
    g.enter(Stage.STOPPING)
    with pytest.raises(SwitchFailed) as failed:
        g.roll_back(ProofFailed("stopping llmhost-a.service failed"))
    message = str(failed.value)
    assert "ROLLBACK FAILED TOO: could not start llmhost-a.service" in message
    assert "the rollback to a was under way" in message
    assert g.stage is Stage.ROLLING_BACK


def test_ctrl_c_while_staging_says_the_old_model_still_serves() -> None:
    g = guard(Guest())
    assert g.on_interrupt() == "g1: switch to b interrupted while staging: a still serves"
    g.enter(Stage.STOPPING)
    g.enter(Stage.STOPPED)
    assert "llmhost-a.service is stopped and disabled; llmhost-b.service is not started" in (
        g.on_interrupt() or ""
    )


def test_the_steps_record_pending_stop_start_and_commit_through_the_shell() -> None:
    guest = Guest()
    g = guard(guest)
    g.stop_old()
    assert g.stage is Stage.STOPPED and g.last_answer is not None  # no server: the stop time
    (pending,) = guest.commands
    assert pending.index('"pending"') < pending.index("systemctl disable --now llmhost-a.service")
    g.start_new(unit_name("b"))
    assert guest.commands[-1] == "systemctl enable --now llmhost-b.service"
    g.answered()
    g.commit()
    assert g.stage is Stage.COMMITTED and '"current": "b"' in guest.commands[-1]


def test_the_commit_removes_the_sources_leftovers_after_the_record_and_only_then() -> None:
    guest = Guest()
    g = guard(guest)
    g.source_leftovers = ("/var/lib/prometheus/node-exporter/llmhost_gate_a.prom",)
    g.stop_old()
    g.start_new(unit_name("b"))
    g.answered()
    assert not any("llmhost_gate_a" in c for c in guest.commands)  # a rollback still needs it
    g.commit()
    record, removal = guest.commands[-1].split(" && { rm -f ")
    assert '"current": "b"' in record
    assert removal == "/var/lib/prometheus/node-exporter/llmhost_gate_a.prom || true; }"


def test_a_busy_old_model_does_not_hold_the_stop_back_and_downtime_counts_from_the_stop() -> None:
    with FakeVLLM(answer_after_s=20) as busy:
        guest = Guest()
        g = guard(guest, busy.url)
        started = time.monotonic()
        g.stop_old()
        assert time.monotonic() - started < LAST_ANSWER_WITHIN_S + 2
    assert g.last_answer == g.stopped_at
    assert "systemctl disable --now llmhost-a.service" in guest.commands[0]


def test_an_answering_old_model_times_the_last_answer() -> None:
    with FakeVLLM() as idle:
        g = guard(Guest(), idle.url)
        g.stop_old()
    assert g.last_answer is not None and g.stopped_at is not None
    assert g.last_answer > g.stopped_at


def test_a_stop_that_fails_says_so_and_leaves_the_stage_for_the_rollback() -> None:
    g = guard(Guest(ok=False))
    with pytest.raises(ProofFailed, match="stopping llmhost-a.service or freeing the GPUs"):
        g.stop_old()
    assert g.stage is Stage.STOPPING and g.armed()
