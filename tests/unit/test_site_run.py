"""`llmhost site`'s parts that need no site: which options each run gets, and the wait for a
guest's sshd (against a local socket that answers like sshd, and one that does not)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from llmhost.site_run import Target, first_run_args, ssh_answers, wait_for_guests


def test_the_first_run_gets_every_option_but_the_limit() -> None:
    args = ["-y", "--limit", "sandbox", "--data", "served_model=x", "--user=root", "--limit=a"]
    assert first_run_args(args) == ["-y", "--data", "served_model=x", "--user=root"]


@pytest.fixture
def fake_sshd() -> Iterator[int]:
    """A listening socket that greets like sshd."""
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            conn.sendall(b"SSH-2.0-OpenSSH_9.2\r\n")
            conn.close()

    threading.Thread(target=serve, daemon=True).start()
    yield port
    server.close()


def test_a_guest_whose_sshd_greets_is_up(fake_sshd: int) -> None:
    up = Target("g", "127.0.0.1", fake_sshd)
    assert ssh_answers(up)
    assert wait_for_guests([up], timeout_s=5, log=lambda _: None) == []


def test_a_guest_that_never_answers_is_named_after_the_bound() -> None:
    closed = socket.create_server(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()  # nothing listens there now
    down = Target("g2", "127.0.0.1", port)
    said: list[str] = []
    assert wait_for_guests([down], timeout_s=3, log=said.append) == [down]
    assert said == ["--> waiting for g2 (ssh), up to 3 s"]
