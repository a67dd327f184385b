"""Per-host throughput baselines: the gate's floor is what this host did, not only the catalog.

The catalog's figures are the reference box's (Kimi: 82.5 tok/s at c=1, 1536 at c=128), and
the tolerance that makes them fair to every host makes them too slack for a fast one: a
sandbox serving 600 tok/s passes a catalog floor of 30, so a 2x regression goes unseen.
So each host keeps its own baseline per (host, model profile, venv, driver, bench
settings), and the floor at each concurrency is the HIGHER of the catalog's floor and this
host's (`effective_floors`). A change of venv, driver or bench settings is a new key: such a
change starts from the catalog floor again instead of being judged against numbers from
different software.

Each figure is the median of the gate's measured runs (BenchProfile.runs, after a warm-up
that lasts until two runs agree). The host's floor is its baseline x (1 - margin), margin =
max(min_tolerance, z x scatter) capped at the catalog's tolerance (`margin_for`), the scatter
combining the baseline's spread with the judged sweep's own: the box's scatter decides how
close a floor can sit.

The rules (`baseline_update`):
- the first run of a key that passes the catalog floor at every concurrency records it;
- it is not kept from that run alone: the next passing runs join it until it holds the first
  `baseline_runs` (3) passing runs (until then it sets no floor), and the baseline is their
  median, its spread as `grown` says (so a first run on a cold or a bad day is outvoted;
  after that it stands, no run moves it up or down);
- a run with `verify.rebaseline` replaces it when it passes the catalog floor, even below
  the host floor: rebaselining after a deliberate change (a slower but correct setting) is
  the point, and the catalog floor still bounds how low a baseline can go;
- nothing else changes it. Every run stays in history.jsonl (history.py) either way.

Stored on the control machine next to the history: `<results_dir>/<host>/baselines.json`,
one JSON object keyed by `BaselineKey.id()`, written atomically (temporary file, then
os.replace) so an interrupted deploy never leaves half a file that would drop a floor.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import statistics
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from llmhost.bench.history import host_dir
from llmhost.bench.result import robust_cv

BASELINES_FILE = "baselines.json"
FIRST_PASS = "first passing run"
REBASELINE = "verify.rebaseline"
CATALOG = "catalog"


def cpu_placement(engine: str | None, front_end: str | None) -> str:
    """A CPU guest's placement as a key part: 'engine 0, front end 1' ('vLLM's choice' and
    'shared' where unset)."""
    return f"engine {engine or 'vLLM-chosen'}, front end {front_end or 'shared'}"


def bench_settings(input_len: int, output_len: int, concurrencies: Iterable[int]) -> str:
    """The bench settings part of a key: 'in128-out128-c1,8' (concurrencies sorted, unique)."""
    levels = ",".join(str(c) for c in sorted(set(concurrencies)))
    return f"in{input_len}-out{output_len}-c{levels}"


@dataclass(frozen=True)
class BaselineKey:
    """What a host baseline is valid for; any difference is a different baseline."""

    host: str
    model_profile: str
    venv: str  # the venv's spec digest (or vLLM version): new software, new baseline
    driver: str  # the NVIDIA driver version; "" on a CPU host
    settings: str  # bench_settings(input_len, output_len, concurrencies)
    # The CPUs a CPU guest's engine and front end run on (cpu_placement): the same guest
    # with fewer or other cores is another machine. "" on a GPU guest, whose keys (and
    # stored entries) stay as they were.
    placement: str = ""

    def id(self) -> str:
        """Stable, readable id: the JSON object key in baselines.json."""
        return (
            f"host={self.host};model={self.model_profile};venv={self.venv};"
            f"driver={self.driver};settings={self.settings}"
        ) + (f";placement={self.placement}" if self.placement else "")

    def describe(self) -> str:
        driver = self.driver or "none (CPU)"
        where = f", {self.placement}" if self.placement else ""
        return (
            f"{self.model_profile} on {self.host} (venv {self.venv}, driver {driver}, "
            f"{self.settings}{where})"
        )

    def fields(self) -> dict[str, str]:
        named = {
            "host": self.host,
            "model_profile": self.model_profile,
            "venv": self.venv,
            "driver": self.driver,
            "settings": self.settings,
        }
        return named | ({"placement": self.placement} if self.placement else {})


@dataclass(frozen=True)
class HostBaseline:
    """A host's recorded output tok/s per concurrency for one key, and where it came from."""

    key: BaselineKey
    baselines: dict[int, float]
    set_at: str  # ISO 8601, UTC
    reason: str  # FIRST_PASS, "passing run i of n" or REBASELINE
    source_file: str = ""  # the results JSON of the run that set it
    previous: dict[str, Any] | None = field(default=None, compare=False)  # what it replaced
    # Per concurrency: the coefficient of variation of the runs whose median it is (0 when
    # it came from one run): the box's own scatter, which sizes the floor's margin.
    spread: dict[int, float] = field(default_factory=dict)
    # Per concurrency: the figure of each passing run it is the median of (first-N rule);
    # empty for a baseline recorded before the rule (it counts as complete).
    samples: dict[int, list[float]] = field(default_factory=dict)

    def sample_count(self) -> int:
        return min((len(v) for v in self.samples.values()), default=0)

    def complete(self, first_n: int) -> bool:
        """Made of `first_n` passing runs (or recorded before the rule: no samples)."""
        return not self.samples or self.sample_count() >= first_n

    @property
    def date(self) -> str:
        return self.set_at[:10]

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = self.key.fields() | {
            "baselines": {str(c): v for c, v in sorted(self.baselines.items())},
            "spread": {str(c): v for c, v in sorted(self.spread.items())},
            "samples": {str(c): v for c, v in sorted(self.samples.items())},
            "set_at": self.set_at,
            "source_file": self.source_file,
            "reason": self.reason,
        }
        if self.previous is not None:
            data["previous"] = self.previous
        return data

    @classmethod
    def from_json(cls, key: BaselineKey, data: dict[str, Any]) -> HostBaseline:
        return cls(
            key=key,
            baselines={int(c): float(v) for c, v in data["baselines"].items()},
            set_at=str(data["set_at"]),
            reason=str(data.get("reason", "")),
            source_file=str(data.get("source_file", "")),
            previous=data.get("previous"),
            spread={int(c): float(v) for c, v in (data.get("spread") or {}).items()},
            samples={int(c): [float(x) for x in v] for c, v in (data.get("samples") or {}).items()},
        )


def baselines_path(results_dir: Path, host: str) -> Path:
    return host_dir(results_dir, host) / BASELINES_FILE


def _read_store(path: Path) -> dict[str, Any]:
    """The whole file; a broken one is an error, never an empty store (that drops floors)."""
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not valid JSON ({e}); fix or remove it") from e
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object of baselines")
    return data


def load_host_baseline(results_dir: Path, key: BaselineKey) -> HostBaseline | None:
    """This key's recorded baseline, or None when the key has none yet."""
    entry = _read_store(baselines_path(results_dir, key.host)).get(key.id())
    if entry is None:
        return None
    stored = {name: entry.get(name) for name in key.fields()}
    if stored != key.fields():
        raise ValueError(f"baselines.json: entry {key.id()!r} holds another key: {stored}")
    return HostBaseline.from_json(key, entry)


def record_baseline(
    results_dir: Path,
    key: BaselineKey,
    measured: dict[int, float],
    reason: str,
    source_file: str = "",
    now: dt.datetime | None = None,
    spread: dict[int, float] | None = None,
    samples: dict[int, list[float]] | None = None,
) -> HostBaseline:
    """Set (or replace) the key's baseline to `measured`; other keys stay as they were."""
    if not measured:
        raise ValueError(f"no measurement to record as the baseline of {key.describe()}")
    path = baselines_path(results_dir, key.host)
    store = _read_store(path)
    when = (now or dt.datetime.now(dt.UTC)).astimezone(dt.UTC)
    old = store.get(key.id())
    kept = ("baselines", "spread", "samples", "set_at", "reason", "source_file")
    previous = {name: old[name] for name in kept if name in old} if old else None
    baseline = HostBaseline(
        key=key,
        baselines=dict(measured),
        set_at=when.isoformat(timespec="seconds"),
        reason=reason,
        source_file=source_file,
        previous=previous,
        spread=dict(spread or {}),
        samples={c: list(v) for c, v in (samples or {}).items()},
    )
    store[key.id()] = baseline.to_json()
    _write_atomically(path, json.dumps(store, indent=2, sort_keys=True) + "\n")
    return baseline


def _write_atomically(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@dataclass(frozen=True)
class Floor:
    """The floor at one concurrency: which baseline figure set it and where that came from."""

    baseline: float  # the figure the floor is taken from: the catalog's or the host's
    floor: float  # baseline x (1 - margin)
    source: str  # "catalog" or "host baseline of <date>"
    catalog: float  # the catalog's figure, always
    catalog_floor: float  # catalog x (1 - tolerance): what a rebaseline must still pass
    host: float | None = None  # this host's figure, when it has one here
    margin: float = 0.0  # 1 - floor / baseline
    spread: float | None = None  # the scatter the margin was sized on: the host baseline's
    # and this measurement's, combined (None: the catalog set the floor)
    resolvable: bool = True  # z x spread fits under the tolerance


def margin_for(
    spread: float, min_tolerance: float, z: float, tolerance: float
) -> tuple[float, bool]:
    """(margin, resolvable): max(min_tolerance, z x spread) capped at the tolerance; not
    resolvable when z x the box's own scatter alone is wider than the tolerance allows."""
    return min(tolerance, max(min_tolerance, z * spread)), z * spread <= tolerance


def effective_floors(
    catalog: dict[int, float],
    host: HostBaseline | None,
    tolerance: float,
    min_tolerance: float | None = None,
    z: float = 3.0,
    first_n: int = 1,
    noise: dict[int, float] | None = None,
) -> dict[int, Floor]:
    """Per catalog concurrency: the higher of two floors, the catalog's (its figure x (1 -
    tolerance)) and the host's (its median x (1 - margin), margin from its own spread,
    `margin_for`). `min_tolerance` None: the margin is the tolerance (no spread recorded).
    A host baseline of fewer than `first_n` passing runs sets no floor yet: the catalog's
    alone judges the runs that make it (Floor.source says how far it has come).
    `noise`: the standard error of the figure being judged, per concurrency: a gate compares
    two scattered figures, so the margin takes z x their combined scatter (a sweep measured
    in a noisy minute is not a regression for reading a little low).

    A concurrency the host baseline lacks uses the catalog figure; a host figure at a
    concurrency the catalog lacks is not gated (the catalog decides what is measured).
    """
    floors = {}
    for conc, reference in sorted(catalog.items()):
        catalog_floor = reference * (1 - tolerance)
        floor = Floor(reference, catalog_floor, CATALOG, reference, catalog_floor, margin=tolerance)
        own = host.baselines.get(conc) if host is not None else None
        if host is not None and own is not None and not host.complete(first_n):
            have = host.sample_count()
            source = f"catalog; host baseline {have} of {first_n} runs, not yet a floor"
            floor = replace(floor, source=source, host=own)
        elif host is not None and own is not None:
            spread = math.hypot(host.spread.get(conc, 0.0), (noise or {}).get(conc, 0.0))
            lowest = tolerance if min_tolerance is None else min_tolerance
            margin, resolvable = margin_for(spread, lowest, z, tolerance)
            source = f"host baseline of {host.date}"
            mine = Floor(
                own,
                own * (1 - margin),
                source,
                reference,
                catalog_floor,
                own,
                margin,
                spread,
                resolvable,
            )
            floor = mine if mine.floor > floor.floor else replace(floor, host=own)
        floors[conc] = floor
    return floors


def grown(
    own: HostBaseline | None, measured: dict[int, float], within: dict[int, float]
) -> tuple[dict[int, float], dict[int, float], dict[int, list[float]]]:
    """(baselines, spread, samples) once this run joins `own` (None: it starts one): each
    level's figure is the median of its samples, its spread the larger of the samples'
    scatter around their median (robust_cv: a cold first run among three does not widen the
    floor, it is simply outvoted) and `within`, this run's own figure's scatter (the
    standard error of its median, gates.measured_spread)."""
    samples = {c: [*(own.samples.get(c, []) if own else []), v] for c, v in measured.items()}
    figures = {c: statistics.median(v) for c, v in samples.items()}
    spread = {c: max(robust_cv(v), within.get(c, 0.0)) for c, v in samples.items()}
    return figures, spread, samples


def baseline_update(
    host_baseline: HostBaseline | None,
    passed_catalog: bool,
    rebaseline: bool,
    first_n: int = 3,
) -> str | None:
    """The reason to record this run into the key's baseline, or None to leave it as it is.

    `passed_catalog`: at or above the CATALOG floor at every gated concurrency
    (GateLine.catalog_ok).
    - no baseline yet and the catalog passed: "first passing run" (with or without
      rebaseline): it starts one;
    - a baseline and `rebaseline`, the catalog passed: "verify.rebaseline", even below the
      host floor (the deliberate change being accepted): it starts one afresh;
    - a baseline of fewer than `first_n` passing runs (which sets no floor yet: the catalog
      judges these runs): it joins, "passing run i of n" (a first run on a cold server is
      outvoted by the median, not kept);
    - otherwise None: a complete baseline stands until a rebaseline.
    """
    if not passed_catalog:
        return None
    if host_baseline is None:
        return FIRST_PASS
    if rebaseline:
        return REBASELINE
    if not host_baseline.complete(first_n):
        return f"passing run {host_baseline.sample_count() + 1} of {first_n}"
    return None
