"""How long a proof may wait on the server, derived from the profile: one place, pure numbers.

Why: a starved server (0.6 output tok/s under CPU hogs) made the correctness probe under
traffic wait 16 minutes with no line and no end. Every proof that waits on the server now has
a deadline sized on what the profile says the server does, and fails at it with the numbers.

The figure every deadline starts from is the catalog's floor (bench.baselines x (1 -
tolerance)): the slowest the gate lets the server be. A server far below it is starved, not
slow, and no answer it would still give changes a verdict:

- correctness: the probe is one stream at a time (under traffic, beside one short side
  request), so its expected rate is the per-stream floor of the lowest gated concurrency
  (baseline / c there). A server at `starved_fraction` (a tenth) of that is starved. Each
  request may take max_tokens at that rate (at least `request_min_s`: a prefill, a first
  request after a start), the whole probe every request's max_tokens at that rate (at least
  `correctness_min_s`). A profile without a gate gets `fallback_floor_tok_s` per stream.
- the gate's sweep (and each sweep of the draft A/B): its duration at the catalog floor is
  exact for the measured runs (output tok/s is output tokens over the run's duration), so the
  deadline is that times `sweep_factor` (a sweep at a quarter of the floor still finishes and
  fails the gate with its figures; slower is starved), plus the warm-up's own cap (runs or
  seconds, whichever ends it first, at the same factor) and vLLM's import (`sweep_startup_s`),
  at least `sweep_min_s`.

`Limits` holds the constants; tests pass small ones to run a deadline in a second.
"""

from __future__ import annotations

from dataclasses import dataclass

from llmhost.catalog import BenchProfile


@dataclass(frozen=True)
class Limits:
    """The constants of the formulas (the module docstring says why each)."""

    starved_fraction: float = 0.1  # of the catalog floor: below it a server is starved
    fallback_floor_tok_s: float = 10.0  # per stream, for a profile without a gate
    request_min_s: float = 60.0  # one correctness request, whatever its length
    correctness_min_s: float = 120.0  # the whole probe (or one round set under traffic)
    sweep_factor: float = 4.0  # x the sweep's duration at the catalog floor
    sweep_startup_s: float = 60.0  # vLLM's import and the tokenizer, once a sweep
    run_overhead_s: float = 5.0  # each run's dataset and client start
    sweep_min_s: float = 300.0
    progress_every_s: float = 15.0  # the longest a waiting proof stays silent


LIMITS = Limits()


def stream_floor_tok_s(bench: BenchProfile | None, limits: Limits = LIMITS) -> float:
    """Output tok/s of one stream at the catalog floor: the lowest gated concurrency's
    baseline per stream, less the tolerance; `fallback_floor_tok_s` without a gate."""
    if bench is None or not bench.baselines:
        return limits.fallback_floor_tok_s
    lowest = min(bench.baselines)
    return bench.baselines[lowest] / lowest * (1 - bench.tolerance)


def starved_tok_s(bench: BenchProfile | None, limits: Limits = LIMITS) -> float:
    """The rate below which a stream is starved: a fraction of its floor."""
    return stream_floor_tok_s(bench, limits) * limits.starved_fraction


def request_timeout_s(
    max_tokens: int, bench: BenchProfile | None, limits: Limits = LIMITS
) -> float:
    """One correctness request: its max_tokens at the starved rate, at least request_min_s."""
    return max(limits.request_min_s, max_tokens / starved_tok_s(bench, limits))


def correctness_deadline_s(
    requests: int, max_tokens: int, bench: BenchProfile | None, limits: Limits = LIMITS
) -> float:
    """The whole probe: every request's max_tokens at the starved rate, at least
    correctness_min_s (and at least one request's timeout)."""
    tokens = requests * max_tokens
    return max(
        limits.correctness_min_s,
        request_timeout_s(max_tokens, bench, limits),
        tokens / starved_tok_s(bench, limits),
    )


def level_run_s(
    bench: BenchProfile, concurrency: int, prompts: int, limits: Limits = LIMITS
) -> float:
    """One run of `prompts` requests (and the run's warm-up requests) at `concurrency`, at
    the catalog floor of that concurrency, plus its start."""
    floor = bench.baselines[concurrency] * (1 - bench.tolerance)
    tokens = (prompts + bench.warmup_requests) * bench.output_len
    return tokens / floor + limits.run_overhead_s


def sweep_at_floor_s(bench: BenchProfile, levels: list[int], limits: Limits = LIMITS) -> float:
    """The measured runs of a sweep (`runs` rounds of every level) at the catalog floor."""
    one_round = sum(level_run_s(bench, c, bench.num_prompts(c), limits) for c in levels)
    return bench.runs * one_round


def warmup_allowance_s(bench: BenchProfile, levels: list[int], limits: Limits = LIMITS) -> float:
    """The warm-up at the top level, at `sweep_factor` x the floor: it ends at its cap on
    runs, or on seconds after the run that passes it, whichever comes first."""
    if not bench.warmup_max_runs or not levels:
        return 0.0
    top = max(levels)
    run = limits.sweep_factor * level_run_s(bench, top, bench.warmup_prompts(top), limits)
    return min(bench.warmup_max_runs * run, bench.warmup_max_s + run)


def sweep_deadline_s(bench: BenchProfile, levels: list[int], limits: Limits = LIMITS) -> float:
    """The sweep's deadline: vLLM's start, the warm-up's allowance and `sweep_factor` x the
    measured runs at the catalog floor; at least sweep_min_s."""
    expected = limits.sweep_startup_s + warmup_allowance_s(bench, levels, limits)
    expected += limits.sweep_factor * sweep_at_floor_s(bench, levels, limits)
    return max(limits.sweep_min_s, expected)
