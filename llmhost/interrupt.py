"""Ctrl-C that works during llmhost's long waits (readiness, benchmarks, the draft A/B).

pyinfra's own SIGINT handler only takes effect when the running operation returns and then
exits 0, so a 40-minute readiness wait ignores Ctrl-C. Deploy files call `install()`. On
SIGINT every wait registered with `interruptible()` gets `Interrupted` raised inside it (so
its cleanup runs: the A/B swap gives the serving unit back, a benchmark child is stopped),
one line says what was interrupted, and the process exits 130 within about 2 seconds. A
second Ctrl-C, or one outside any wait, exits at once. Unit and env files are written
atomically (operations/files.py) and a restart left pending is found by a fact on the next
run, so that run converges from wherever this one stopped.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import gevent

EXIT_CODE = 130  # the shell's code for a process ended by SIGINT
CLEANUP_S = 1.5

_waits: dict[gevent.Greenlet, str] = {}
_fired: list[bool] = []
_state_lines: list[Callable[[], str | None]] = []


class Interrupted(Exception):  # noqa: N818 - reads as what happened
    """Raised inside a registered wait when the user pressed Ctrl-C."""


def install() -> None:
    """Take SIGINT over from pyinfra (idempotent; call it from a deploy file)."""
    from pyinfra.api.exceptions import OperationError  # here: llmhost.proofs runs without pyinfra

    from llmhost.proofs.base import ProofFailed

    if signal.getsignal(signal.SIGINT) is not _on_sigint:
        signal.signal(signal.SIGINT, _on_sigint)
        hub = gevent.get_hub()  # the one line above says it all: no greenlet traceback
        # A failed proof's message is the whole story (pyinfra prints it at the end); a
        # traceback from the greenlet that ran it only buries it.
        hub.NOT_ERROR = (*hub.NOT_ERROR, Interrupted, OperationError, ProofFailed)


def describe_state_with(line: Callable[[], str | None]) -> None:
    """On Ctrl-C, also print `line()` (when not None): e.g. where a switch in flight stands."""
    _state_lines.append(line)


def _say_state() -> None:
    for line in _state_lines:
        try:
            text = line()
        except Exception:  # noqa: BLE001 - a broken describer must not block the exit
            text = None
        if text:
            _say(text)


@contextmanager
def interruptible(what: str) -> Iterator[None]:
    """Register the current greenlet's wait as `what` (e.g. "readiness of llmhost-x.service")."""
    current = gevent.getcurrent()
    _waits[current] = what  # type: ignore[index]
    try:
        yield
    finally:
        _waits.pop(current, None)  # type: ignore[arg-type]


def _say(line: str) -> None:
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def _on_sigint(signum: int, frame: object) -> None:
    if _fired:
        _say("interrupted again: exiting now")
        os._exit(EXIT_CODE)
    _fired.append(True)
    waits = dict(_waits)
    if not waits:
        _say("interrupted by Ctrl-C between operations: exiting (the next run converges)")
        _say_state()
        os._exit(EXIT_CODE)
    what = "; ".join(sorted(set(waits.values())))
    _say(f"interrupted by Ctrl-C during {what}: cleaning up and exiting")
    _say_state()
    for greenlet, wait in waits.items():
        gevent.kill(greenlet, Interrupted(f"interrupted by Ctrl-C during {wait}"))
    gevent.spawn(_exit_after, list(waits))


def _exit_after(greenlets: list[gevent.Greenlet]) -> None:
    gevent.joinall(greenlets, timeout=CLEANUP_S)
    sys.stdout.flush()
    os._exit(EXIT_CODE)
