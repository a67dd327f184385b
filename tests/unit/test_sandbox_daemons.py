"""The sandbox's servers on the bridge (llmhost/testbed/sandbox.py), on loopback: a port that
another process already serves (another checkout's sandbox) is used and said so, not fought
over; a free one gets this checkout's own daemon, tracked by its PID file."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from llmhost.testbed import sandbox
from tests.helpers import free_port


@pytest.fixture
def on_loopback(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(sandbox, "BRIDGE_IP", "127.0.0.1")
    monkeypatch.setattr(sandbox, "STATE_DIR", tmp_path)
    return tmp_path


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A port some other process of this machine listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


def test_a_port_served_by_another_process_is_used_and_said_so(
    on_loopback: Path, taken_port: int, capsys: pytest.CaptureFixture[str]
) -> None:
    # The command would fail if it ran: nothing is started beside the other server.
    sandbox._start_daemon("proxpi", [sys.executable, "-c", "raise SystemExit(3)"], taken_port)
    said = capsys.readouterr().out
    assert f"proxpi: 127.0.0.1:{taken_port} is already served (pid {os.getpid()}" in said
    assert "using it" in said
    assert not (on_loopback / "proxpi.pid").exists()


def test_a_free_port_gets_this_checkouts_own_daemon(
    on_loopback: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    port = free_port()
    server = [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"]
    sandbox._start_daemon("wheels", server, port)
    pid = sandbox._pid_alive(on_loopback / "wheels.pid")
    try:
        assert pid is not None and sandbox._listens(port)
        assert f"started wheels (pid {pid})" in capsys.readouterr().out
        # Asked again, it is this checkout's own and already running: nothing more starts.
        sandbox._start_daemon("wheels", server, port)
        assert "wheels already running" in capsys.readouterr().out
        assert sandbox._pid_alive(on_loopback / "wheels.pid") == pid
    finally:
        if pid is not None:
            os.kill(pid, signal.SIGTERM)


def test_make_test_forgets_a_failed_switch_the_guest_remembers(tmp_path: Path) -> None:
    """The guest-side script `make test` runs first (sandbox forget-failed): the failed
    switch goes, the rest of the record stays; a record without one is left as it is."""
    record = tmp_path / "serving.json"
    kept = {"current": "tiny-llama", "previous": ["tiny-llama-alt"]}
    record.write_text(json.dumps({**kept, "failed": {"model": "tiny-llama-wrong", "at": 1}}))

    def run() -> str:
        argv = [sys.executable, "-", str(record)]
        return subprocess.run(
            argv, input=sandbox.FORGET_FAILED, capture_output=True, text=True
        ).stdout

    assert run().strip() == "forgot the failed switch to tiny-llama-wrong"
    assert json.loads(record.read_text()) == kept
    assert run() == "" and json.loads(record.read_text()) == kept
    record.unlink()
    assert run() == ""  # no record: nothing to forget
