"""Say what a proof waits on while it waits, from the proof's own thread.

Why from the proof's own thread: under pyinfra the `Log` a proof is handed prints under the
host's prefix, and pyinfra keeps the host per greenlet: a line printed from a helper greenlet
would have no host. So the blocking call runs in a worker (an HTTP request needs no host),
and the caller waits on it in slices, printing a line after each slice. Under pyinfra
`threading` is gevent's (patched before any proof runs), so the worker is a greenlet and the
other hosts go on; the worker is made per call, never at import.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TypeVar

import gevent

T = TypeVar("T")


def wait_for(work: Callable[[], T], every_s: float, waiting: Callable[[float], None]) -> T:
    """`work()` in a worker; every `every_s` while it runs, `waiting(seconds so far)` here.
    Its value, or its exception raised here."""
    done = threading.Event()
    box: dict[str, object] = {}

    def run() -> None:
        try:
            box["value"] = work()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller, raised there
            box["error"] = exc
        finally:
            done.set()

    threading.Thread(target=run, daemon=True, name="llmhost-proof-wait").start()
    start = time.monotonic()
    while not done.wait(every_s):
        waiting(time.monotonic() - start)
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    return box["value"]  # type: ignore[return-value]


def pause(seconds: float, every_s: float, waiting: Callable[[float, float], None]) -> None:
    """Sleep `seconds` (gevent's sleep: other hosts go on), calling `waiting(slept, seconds)`
    every `every_s` meanwhile, so no pause of a proof is silent for longer."""
    slept = 0.0
    while slept < seconds:
        step = min(every_s, seconds - slept)
        gevent.sleep(step)
        slept += step
        if slept < seconds:
            waiting(slept, seconds)
