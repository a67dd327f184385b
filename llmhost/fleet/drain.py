"""A replica out of rotation is drained when vLLM has nothing running and nothing waiting.

Why from the replica's own /metrics: the router has no drain endpoint and forgets a removed
worker at once, while requests already sent keep their connection to it. vLLM's gauges
`vllm:num_requests_running` and `vllm:num_requests_waiting` (summed over engines and models)
say when the last one has finished. The exposition format is read as for the spec-decode
counters (llmhost/vllm_metrics.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from llmhost.interrupt import Interrupted
from llmhost.vllm_metrics import summed
from llmhost.wait import until

IN_FLIGHT = ("vllm:num_requests_running", "vllm:num_requests_waiting")


def in_flight(metrics_text: str) -> int | None:
    """Requests running plus waiting on a replica; None when its metrics have neither gauge
    (not a vLLM server, or one too old to say)."""
    sums = summed(metrics_text, IN_FLIGHT)
    return round(sum(sums.values())) if sums else None


@dataclass(frozen=True)
class Drained:
    """How a drain ended: empty, or the bound passed with `left` requests still in flight."""

    empty: bool
    left: int | None
    waited_s: float


def wait_drained(
    metrics: Callable[[], str],
    bound_s: float,
    every_s: float = 1.0,
    clock: Callable[[], float] | None = None,
    sleep: Callable[[float], None] | None = None,
) -> Drained:
    """Poll `metrics()` until nothing is in flight or `bound_s` passes. A replica that cannot
    say (no gauges, no answer) counts as not drained: the bound then decides."""
    now = clock or time.monotonic
    start = now()
    left: int | None = None

    def empty() -> bool:
        nonlocal left
        try:
            left = in_flight(metrics())
        except Interrupted:
            raise  # Ctrl-C ends the wait, not the replica's chance to drain
        except Exception:  # noqa: BLE001 - an unreachable replica is simply not known to be empty
            left = None
        return left == 0

    done = until(empty, bound_s, every_s=every_s, clock=clock, sleep=sleep)
    return Drained(bool(done), left, round(now() - start, 1))
