"""When readiness stops waiting for a loading unit (llmhost/proofs/readiness.py, crash_reason):
a usage error at its first exit, any other crash after two restarts, a load never."""

from __future__ import annotations

from llmhost.proofs.readiness import crash_reason

UNIT = "llmhost-tiny-llama.service"


def test_a_usage_error_stops_the_wait_at_its_first_exit() -> None:
    state = {"SubState": "auto-restart", "ExecMainStatus": "2", "NRestarts": "0"}
    reason = crash_reason(UNIT, state, restarts_before=0)
    assert reason is not None and "exited with status 2" in reason and "usage error" in reason


def test_a_usage_error_of_a_unit_that_gave_up_stops_it_too() -> None:
    state = {"SubState": "failed", "ExecMainStatus": "2", "NRestarts": "0"}
    assert crash_reason(UNIT, state, restarts_before=0) is not None


def test_another_exit_is_given_two_restarts() -> None:
    once = {"SubState": "auto-restart", "ExecMainStatus": "1", "NRestarts": "1"}
    assert crash_reason(UNIT, once, restarts_before=0) is None
    twice = {"SubState": "start", "ExecMainStatus": "0", "NRestarts": "2"}
    reason = crash_reason(UNIT, twice, restarts_before=0)
    assert reason == f"{UNIT} crashed and was restarted 2 times while loading"


def test_restarts_before_the_wait_do_not_count() -> None:
    state = {"SubState": "running", "ExecMainStatus": "0", "NRestarts": "5"}
    assert crash_reason(UNIT, state, restarts_before=4) is None
    assert crash_reason(UNIT, {**state, "NRestarts": "6"}, restarts_before=4) is not None


def test_a_running_unit_is_waited_for_whatever_its_last_exit_was() -> None:
    # systemd keeps the last exit's status while the next process runs: not a reason.
    state = {"SubState": "running", "ExecMainStatus": "2", "NRestarts": "1"}
    assert crash_reason(UNIT, state, restarts_before=1) is None
    assert crash_reason(UNIT, {}, restarts_before=0) is None
