"""Verdicts on benchmark results: the throughput gate and the draft A/B gate.

Pure functions of numbers, so the exact pass/fail rule is unit-tested without a server;
the verification operations only fetch numbers and print these verdicts. The throughput
floor is the higher of the catalog's figure and this host's own baseline (baselines.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from llmhost.bench.baselines import CATALOG, HostBaseline, effective_floors
from llmhost.bench.result import LevelResult
from llmhost.catalog import BenchProfile


@dataclass(frozen=True)
class GateLine:
    """One concurrency of the gate. Its fields go into the results JSON (vars())."""

    concurrency: int
    measured: float
    baseline: float  # the figure the floor came from: max(catalog, host baseline)
    floor: float
    source: str = CATALOG  # "catalog" or "host baseline of <date>"
    catalog: float | None = None  # the catalog's figure (None: same as baseline)
    catalog_floor: float | None = None  # catalog x (1 - tolerance) (None: same as floor)

    @property
    def ok(self) -> bool:
        return self.measured >= self.floor

    @property
    def catalog_ok(self) -> bool:
        """At or above the catalog floor: what a first baseline or a rebaseline must pass."""
        floor = self.floor if self.catalog_floor is None else self.catalog_floor
        return self.measured >= floor

    def text(self) -> str:
        verdict = "OK" if self.ok else "BELOW BASELINE"
        origin = self.source
        if self.source != CATALOG and self.catalog is not None:
            origin += f", catalog {self.catalog:.1f}"
        return (
            f"c={self.concurrency}: {self.measured:.1f} output tok/s vs baseline "
            f"{self.baseline:.1f} (floor {self.floor:.1f}, {self.measured / self.baseline:.0%} "
            f"of baseline; {origin}) {verdict}"
        )


def throughput_gate(
    results: list[LevelResult], bench: BenchProfile, host: HostBaseline | None = None
) -> list[GateLine]:
    """One line per catalog concurrency: measured output tok/s against its floor.

    The floor is max(catalog figure, this host's baseline figure) x (1 - tolerance)
    (baselines.effective_floors); without a host baseline, the catalog's alone.
    """
    by_conc = {r.max_concurrency: r for r in results}
    lines = []
    for conc, f in effective_floors(bench.baselines, host, bench.tolerance).items():
        measured = by_conc[conc].output_throughput if conc in by_conc else 0.0
        lines.append(
            GateLine(conc, measured, f.baseline, f.floor, f.source, f.catalog, f.catalog_floor)
        )
    return lines


def measured_tok_s(lines: list[GateLine]) -> dict[int, float]:
    """The gated concurrencies' measured tok/s: what record_baseline stores."""
    return {line.concurrency: line.measured for line in lines}


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
