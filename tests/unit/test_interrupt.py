"""Ctrl-C during a wait ends a real pyinfra run within 2 s, non-zero, with one line saying
what was interrupted, after the wait's cleanup ran and its child process was stopped."""

from __future__ import annotations

import subprocess
import time

from tests.helpers import FIXTURES, PYINFRA, interrupt_when

DEPLOY = FIXTURES / "deploys" / "interruptible_wait.py"


def start_and_interrupt() -> tuple[int, str, float]:
    return interrupt_when([PYINFRA, "-y", "@local", str(DEPLOY)], "WAIT STARTED", timeout=60)


def test_ctrl_c_during_a_wait_exits_130_within_2_seconds_after_cleanup() -> None:
    rc, output, took = start_and_interrupt()
    assert rc == 130, output
    assert took <= 2.0, f"took {took:.2f}s"
    assert "interrupted by Ctrl-C during the benchmark of drill-model" in output
    assert "CLEANUP RAN" in output
    assert "Exiting upon user request" not in output  # pyinfra's exit-0 handler is replaced
    assert "Traceback" not in output


def test_the_wait_child_process_is_stopped() -> None:
    start_and_interrupt()
    time.sleep(0.3)
    left = subprocess.run(["pgrep", "-f", "^sleep 60.4242$"], capture_output=True, text=True)
    assert left.stdout.strip() == "", f"the wait's child outlived the run: {left.stdout}"
