"""Verdicts on benchmark results: the throughput gate and the draft A/B gate.

Pure functions of numbers, so the exact pass/fail rule is unit-tested without a server;
the verification operations only fetch numbers and print these verdicts.
"""

from __future__ import annotations

from dataclasses import dataclass

from llmhost.bench.result import LevelResult
from llmhost.catalog import BenchProfile


@dataclass(frozen=True)
class GateLine:
    concurrency: int
    measured: float
    baseline: float
    floor: float

    @property
    def ok(self) -> bool:
        return self.measured >= self.floor

    def text(self) -> str:
        verdict = "OK" if self.ok else "BELOW BASELINE"
        return (
            f"c={self.concurrency}: {self.measured:.1f} output tok/s vs baseline "
            f"{self.baseline:.1f} (floor {self.floor:.1f}, {self.measured / self.baseline:.0%} "
            f"of baseline) {verdict}"
        )


def throughput_gate(results: list[LevelResult], bench: BenchProfile) -> list[GateLine]:
    """One line per baseline concurrency: measured output tok/s against baseline x (1 - tol)."""
    by_conc = {r.max_concurrency: r for r in results}
    lines = []
    for conc, baseline in sorted(bench.baselines.items()):
        measured = by_conc[conc].output_throughput if conc in by_conc else 0.0
        lines.append(GateLine(conc, measured, baseline, baseline * (1 - bench.tolerance)))
    return lines


@dataclass(frozen=True)
class ABLine:
    concurrency: int
    with_draft: float
    without_draft: float
    ab_tolerance: float

    @property
    def ratio(self) -> float:
        return self.with_draft / self.without_draft if self.without_draft else 0.0

    @property
    def ok(self) -> bool:
        return self.ratio >= 1 - self.ab_tolerance

    def text(self) -> str:
        verdict = "draft pays" if self.ratio >= 1 else "draft slower"
        if not self.ok:
            verdict += f" (beyond the {self.ab_tolerance:.0%} noise allowance): FAIL"
        elif self.ratio < 1:
            verdict += f" (within the {self.ab_tolerance:.0%} noise allowance)"
        return (
            f"c={self.concurrency}: with draft {self.with_draft:.1f} tok/s, without "
            f"{self.without_draft:.1f} tok/s, x{self.ratio:.2f}: {verdict}"
        )


def draft_ab(
    with_draft: list[LevelResult],
    without_draft: list[LevelResult],
    concurrencies: list[int],
    ab_tolerance: float,
) -> list[ABLine]:
    a = {r.max_concurrency: r.output_throughput for r in with_draft}
    b = {r.max_concurrency: r.output_throughput for r in without_draft}
    return [ABLine(c, a.get(c, 0.0), b.get(c, 0.0), ab_tolerance) for c in concurrencies]
