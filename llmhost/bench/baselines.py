"""Per-host throughput baselines: the gate's floor is what this host did, not only the catalog.

The catalog's figures are the reference box's (Kimi: 82.5 tok/s at c=1, 1536 at c=128), and
the tolerance that makes them fair to every host makes them too slack for a fast one: a
sandbox serving 600 tok/s passes a catalog floor of 30, so a 2x regression goes unseen.
So each host keeps its own baseline per (host, model profile, venv, driver, bench
settings), and the floor at each concurrency is the HIGHER of the catalog figure and this
host's figure, times (1 - tolerance). A change of venv, driver or bench settings is a new
key: such a change starts from the catalog floor again instead of being judged against
numbers from different software.

The rules (`baseline_update`):
- the first run of a key that passes the catalog floor at every concurrency records it;
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
import os
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llmhost.bench.history import host_dir

BASELINES_FILE = "baselines.json"
FIRST_PASS = "first passing run"
REBASELINE = "verify.rebaseline"
CATALOG = "catalog"


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

    def id(self) -> str:
        """Stable, readable id: the JSON object key in baselines.json."""
        return (
            f"host={self.host};model={self.model_profile};venv={self.venv};"
            f"driver={self.driver};settings={self.settings}"
        )

    def describe(self) -> str:
        driver = self.driver or "none (CPU)"
        return (
            f"{self.model_profile} on {self.host} (venv {self.venv}, driver {driver}, "
            f"{self.settings})"
        )

    def fields(self) -> dict[str, str]:
        return {
            "host": self.host,
            "model_profile": self.model_profile,
            "venv": self.venv,
            "driver": self.driver,
            "settings": self.settings,
        }


@dataclass(frozen=True)
class HostBaseline:
    """A host's recorded output tok/s per concurrency for one key, and where it came from."""

    key: BaselineKey
    baselines: dict[int, float]
    set_at: str  # ISO 8601, UTC
    reason: str  # FIRST_PASS or REBASELINE
    source_file: str = ""  # the results JSON of the run that set it
    previous: dict[str, Any] | None = field(default=None, compare=False)  # what it replaced

    @property
    def date(self) -> str:
        return self.set_at[:10]

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = self.key.fields() | {
            "baselines": {str(c): v for c, v in sorted(self.baselines.items())},
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
) -> HostBaseline:
    """Set (or replace) the key's baseline to `measured`; other keys stay as they were."""
    if not measured:
        raise ValueError(f"no measurement to record as the baseline of {key.describe()}")
    path = baselines_path(results_dir, key.host)
    store = _read_store(path)
    when = (now or dt.datetime.now(dt.UTC)).astimezone(dt.UTC)
    old = store.get(key.id())
    kept = ("baselines", "set_at", "reason", "source_file")
    previous = {name: old[name] for name in kept if name in old} if old else None
    baseline = HostBaseline(
        key=key,
        baselines=dict(measured),
        set_at=when.isoformat(timespec="seconds"),
        reason=reason,
        source_file=source_file,
        previous=previous,
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

    baseline: float  # the figure used: max(catalog, host)
    floor: float  # baseline x (1 - tolerance)
    source: str  # "catalog" or "host baseline of <date>"
    catalog: float  # the catalog's figure, always
    catalog_floor: float  # catalog x (1 - tolerance): what a rebaseline must still pass
    host: float | None = None  # this host's figure, when it has one here


def effective_floors(
    catalog: dict[int, float], host: HostBaseline | None, tolerance: float
) -> dict[int, Floor]:
    """Per catalog concurrency: the higher of the catalog and host figures, x (1 - tolerance).

    A concurrency the host baseline lacks uses the catalog figure; a host figure at a
    concurrency the catalog lacks is not gated (the catalog decides what is measured).
    """
    keep = 1 - tolerance
    floors = {}
    for conc, reference in sorted(catalog.items()):
        own = host.baselines.get(conc) if host is not None else None
        if host is not None and own is not None and own > reference:
            used, source = own, f"host baseline of {host.date}"
        else:
            used, source = reference, CATALOG
        floors[conc] = Floor(used, used * keep, source, reference, reference * keep, own)
    return floors


def baseline_update(
    host_baseline: HostBaseline | None, passed_catalog: bool, rebaseline: bool
) -> str | None:
    """The reason to record this run as the key's baseline, or None to leave it as it is.

    `passed_catalog`: the run is at or above the CATALOG floor at every gated concurrency
    (GateLine.catalog_ok), whatever the host floor said. Then:
    - no baseline yet: record, "first passing run" (with or without rebaseline);
    - a baseline and `rebaseline`: record, "verify.rebaseline", even when the run is below
      the host floor: that is the deliberate change being accepted;
    - otherwise (a baseline and no rebaseline, or below the catalog floor): None.
    """
    if not passed_catalog:
        return None
    if host_baseline is None:
        return FIRST_PASS
    return REBASELINE if rebaseline else None
