"""Wait until something holds, or a deadline passes: the one polling loop of the control side.

Why: six hand-written loops (guests' ssh, the sandbox's ports, boots and ssh, the guest
bridge's container start, a server's readiness) each kept their own deadline arithmetic, and
some slept past their deadline. Here the check runs at once, then every `every_s`, never
sleeps past the deadline, and runs one last time at it; the caller decides what a timeout
means (an error, a report, a host to fail). No library: tenacity's retry-on-exception model
would wrap a loop of ten lines in decorators. Code that runs on a guest keeps its own loop
(llmhost/guest imports nothing from llmhost).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def until(
    check: Callable[[], T],
    timeout_s: float,
    every_s: float = 0.5,
    *,
    clock: Callable[[], float] | None = None,
    sleep: Callable[[float], None] | None = None,
) -> T:
    """`check()` until it returns something truthy, or `timeout_s` has passed: its last value.

    The first call is immediate and the last is at the deadline (a falsy value then means the
    time ran out). `check` may itself decide to stop early by returning a truthy value that
    says so (readiness does: a crashed server, a refused key). `time.sleep` and
    `time.monotonic` are looked up at each call, not at import: under pyinfra they are
    gevent's (patched when the run starts), so other hosts' greenlets and Ctrl-C go on.
    """
    clock = clock or time.monotonic
    deadline = clock() + timeout_s
    while True:
        value = check()
        left = deadline - clock()
        if value or left <= 0:
            return value
        (sleep or time.sleep)(min(every_s, left))
