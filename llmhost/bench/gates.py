"""Verdicts on benchmark results: the throughput gate and the draft A/B gate.

Pure functions of numbers, so the exact pass/fail rule is unit-tested without a server;
the verification operations only fetch numbers and print these verdicts. The throughput
floor is the higher of the catalog's floor and this host's own, sized by the host
baseline's measured spread (baselines.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from llmhost.bench.baselines import CATALOG, HostBaseline, effective_floors
from llmhost.bench.result import LevelResult, coefficient_of_variation
from llmhost.catalog import BenchProfile


@dataclass(frozen=True)
class GateLine:
    """One concurrency of the gate. Its fields go into the results JSON (vars())."""

    concurrency: int
    measured: float  # the median of the measured runs' output tok/s
    baseline: float  # the figure the floor came from: the catalog's or the host baseline's
    floor: float
    source: str = CATALOG  # "catalog" or "host baseline of <date>"
    catalog: float | None = None  # the catalog's figure (None: same as baseline)
    catalog_floor: float | None = None  # catalog x (1 - tolerance) (None: same as floor)
    margin: float | None = None  # 1 - floor / baseline
    baseline_spread: float | None = None  # the scatter the margin is sized on (None: catalog)
    runs: tuple[float, ...] = ()  # every measured run's output tok/s
    spread: float = 0.0  # their CV
    resolvable: bool = True  # the box's scatter fits under the catalog's tolerance
    z: float = 3.0

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
        if not self.resolvable:
            verdict += (
                f"; UNRESOLVED: {self.z:g} x this box's scatter {self.baseline_spread:.1%} "
                f"exceeds the tolerance {self.margin:.0%}, so the floor cannot sit outside its "
                "noise"
            )
        origin = self.source
        if not self.source.startswith(CATALOG) and self.catalog is not None:
            origin += f", catalog {self.catalog:.1f}"
        how = ""
        if self.margin is not None:
            how = f" = baseline - {self.margin:.1%}"
            if self.baseline_spread is not None:
                how += f", scatter {self.baseline_spread:.1%}"
        measured = ""
        if len(self.runs) > 1:
            measured = f"median of {len(self.runs)} runs, CV {self.spread:.1%}; "
        share = self.measured / self.baseline
        return (
            f"c={self.concurrency}: {self.measured:.1f} output tok/s vs baseline "
            f"{self.baseline:.1f} (floor {self.floor:.1f}{how}, {share:.0%} of baseline; "
            f"{measured}{origin}) {verdict}"
        )


def throughput_gate(
    results: list[LevelResult], bench: BenchProfile, host: HostBaseline | None = None
) -> list[GateLine]:
    """One line per catalog concurrency: the median measured output tok/s against its floor.

    The floor is the higher of the catalog's (figure x (1 - tolerance)) and this host's
    baseline x (1 - margin), the margin sized by the baseline's own spread
    (baselines.effective_floors); without a host baseline, the catalog's alone.
    """
    by_conc = {r.max_concurrency: r for r in results}
    noise = {r.max_concurrency: median_se(r.spread, len(r.runs_output_throughput)) for r in results}
    floors = effective_floors(
        bench.baselines,
        host,
        bench.tolerance,
        bench.min_tolerance,
        bench.z,
        bench.baseline_runs,
        noise,
    )
    lines = []
    for conc, f in floors.items():
        result = by_conc.get(conc)
        lines.append(
            GateLine(
                conc,
                result.output_throughput if result else 0.0,
                f.baseline,
                f.floor,
                f.source,
                f.catalog,
                f.catalog_floor,
                f.margin,
                f.spread,
                tuple(result.runs_output_throughput) if result else (),
                result.spread if result else 0.0,
                f.resolvable,
                bench.z,
            )
        )
    return lines


def pooled(sweeps: list[list[LevelResult]]) -> list[LevelResult]:
    """Per concurrency, every measured run of every sweep, and their median: a failed gate's
    confirmation. A regression reads low in every run, so its median stays low; a burst of
    load on the box hits one sweep's runs, which the other sweeps' runs outvote. (The better
    sweep, the rule before, let a 20% regression through whenever one sweep read high.)

    The result keeps the figures (TTFT, TPOT) of the sweep whose median is closest to the
    pooled one, with every run's tok/s and their spread."""
    first, *others = sweeps
    pooled_results = []
    for result in first:
        conc = result.max_concurrency
        mine = [result, *(r for sweep in others for r in sweep if r.max_concurrency == conc)]
        tok_s = [x for r in mine for x in (r.runs_output_throughput or [r.output_throughput])]
        figure = sorted(tok_s)[(len(tok_s) - 1) // 2]  # as median_run: the lower middle run
        closest = min(mine, key=lambda r: abs(r.output_throughput - figure))
        pooled_results.append(
            replace(
                closest,
                output_throughput=figure,
                runs_output_throughput=tok_s,
                spread=coefficient_of_variation(tok_s),
            )
        )
    return pooled_results


def lowest_floor(line: GateLine, tolerance: float) -> float:
    """The lowest floor this level could still get: a host baseline's margin grows with the
    scatter of the runs it judges, up to `tolerance`, and never below the catalog's floor;
    a catalog floor is fixed."""
    if line.catalog_floor is None:
        return line.floor
    return min(line.floor, max(line.catalog_floor, line.baseline * (1 - tolerance)))


def failure_settled(line: GateLine, runs_per_sweep: int, max_sweeps: int, tolerance: float) -> bool:
    """Whether this level fails whatever the sweeps still allowed would read: the median of
    all `runs_per_sweep * max_sweeps` runs (the lower middle, as `pooled` takes it) is below
    the floor once that many runs, (total - 1) // 2 + 1 of them, already are, counted
    against the lowest floor the level could still get (`lowest_floor`). Confirmation stops
    there: a regression costs no sweep that could not change its verdict."""
    total = runs_per_sweep * max_sweeps
    floor = lowest_floor(line, tolerance)
    below = sum(1 for x in (line.runs or (line.measured,)) if x < floor)
    return below >= (total - 1) // 2 + 1


def measured_tok_s(lines: list[GateLine]) -> dict[int, float]:
    """The gated concurrencies' measured tok/s: what record_baseline stores."""
    return {line.concurrency: line.measured for line in lines}


# The standard error of a median of k samples is about sqrt(pi / 2) = 1.2533 times that of
# their mean, sigma / sqrt(k).
MEDIAN_SE = math.sqrt(math.pi / 2)


def median_se(cv: float, runs: int) -> float:
    """How much a median of `runs` runs of this CV scatters: 1.25 x CV / sqrt(runs)."""
    return MEDIAN_SE * cv / math.sqrt(max(1, runs))


def measured_spread(lines: list[GateLine]) -> dict[int, float]:
    """How much each gated figure itself scatters: the standard error of the median of its
    runs (the gate compares medians, not single runs); record_baseline keeps it."""
    return {line.concurrency: median_se(line.spread, len(line.runs)) for line in lines}


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
