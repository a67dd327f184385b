"""When readiness stops waiting for a loading unit (llmhost/proofs/readiness.py, crash_reason):
a usage error at its first exit, any other crash after two restarts, a load never."""

from __future__ import annotations

import re
import time
from pathlib import Path

from llmhost import render
from llmhost.proofs.readiness import CRASH_CHECK_EVERY_S, crash_reason, wait_ready
from tests.helpers import free_port

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


def test_a_crash_seen_only_between_progress_lines_still_stops_the_wait() -> None:
    """A unit exited with a usage error shows it only while systemd waits to restart it
    (auto-restart, RestartSec); the wait looks for it more often than it prints progress."""
    start = time.monotonic()

    def auto_restart_window() -> str | None:  # as crash_reason says during the window only
        return "usage error" if 1.5 <= time.monotonic() - start < 4.0 else None

    result = wait_ready(
        f"http://127.0.0.1:{free_port()}",
        "m",
        timeout_s=8,
        log=lambda _: None,
        interval_s=0.2,
        progress_every_s=15,
        crash_check=auto_restart_window,
        crash_every_s=1.0,
    )
    assert result.stage == "crashed" and result.detail == "usage error", result
    assert result.waited_s < 5, result


def test_the_crash_cadence_fits_inside_the_units_restart_pause() -> None:
    unit = (Path(render.__file__).parent / "templates" / "vllm.service.j2").read_text()
    found = re.search(r"^RestartSec=(\d+)", unit, re.M)
    assert found, "RestartSec not in the unit template"
    assert float(found.group(1)) > 2 * CRASH_CHECK_EVERY_S
