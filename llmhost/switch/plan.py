"""Which model serves, which served before, and what a run must do to switch: pure rules.

One box holds one model: a switch cannot run a canary beside the old model, so it goes in
sequence (stage while the old one serves, stop it, start the new one, prove it) and carries
its own rollback. The guest keeps a small record, `<root>/state/serving.json`, that a fact
reads at the start of every run:

    {"current": "tiny-llama", "previous": ["tiny-llama-ngram"],
     "pending": {"from": "tiny-llama", "to": "tiny-llama-spec", "since": 1764500000},
     "failed": {"model": "tiny-llama-badflag", "why": "...", "at": 1764500000}}

`pending` is written when the old unit is stopped and cleared when the switch commits or
rolls back, so a run interrupted half-way is finished (or rolled back) by the next one. The
previous model's unit and env file stay on disk, disabled, until a later switch commits and
`keep_previous` lets them go; weights are never deleted by a switch.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from llmhost.naming import ab_unit_name, model_of_unit, unit_name, units_of


@dataclass(frozen=True)
class Pending:
    source: str  # the model that served before the switch (the rollback target)
    target: str
    since: float


@dataclass(frozen=True)
class ServingRecord:
    current: str | None = None
    previous: tuple[str, ...] = ()
    pending: Pending | None = None
    failed: dict[str, Any] | None = None

    @classmethod
    def parse(cls, text: str | None) -> ServingRecord:
        """The guest's record; an absent or unreadable file is an empty record."""
        try:
            data = json.loads(text or "{}")
        except ValueError:
            return cls()
        if not isinstance(data, dict):
            return cls()
        pending = data.get("pending")
        return cls(
            current=data.get("current") or None,
            previous=tuple(p for p in data.get("previous", ()) if isinstance(p, str)),
            pending=(
                Pending(str(pending["from"]), str(pending["to"]), float(pending.get("since", 0)))
                if isinstance(pending, dict) and "from" in pending and "to" in pending
                else None
            ),
            failed=data.get("failed") if isinstance(data.get("failed"), dict) else None,
        )

    def describe_previous(self) -> str:
        """For the state document: what a rollback would go back to, and what is in flight."""
        text = ", ".join(self.previous) + " (unit kept, disabled)" if self.previous else "none"
        if self.pending:
            text += f"; a switch {self.pending.source} -> {self.pending.target} is unfinished"
        if self.failed:
            text += f"; last failed switch: to {self.failed.get('model')}"
        return text

    def dump(self) -> str:
        data: dict[str, Any] = {"current": self.current, "previous": list(self.previous)}
        if self.pending:
            data["pending"] = {
                "from": self.pending.source,
                "to": self.pending.target,
                "since": int(self.pending.since),
            }
        if self.failed:
            data["failed"] = self.failed
        return json.dumps(data, sort_keys=True)


@dataclass(frozen=True)
class SwitchPlan:
    """What this run does about the served model, decided at the start of the run."""

    target: str  # the model the data asks for
    source: str | None  # the model to switch away from (and roll back to); None: no switch
    resumed: bool  # an earlier run stopped `source` and was interrupted: rollback is armed
    keep_now: frozenset[str]  # units that stay on disk during this run
    retire_after: frozenset[str]  # units removed once the switch commits
    committed: ServingRecord  # the record once the run succeeds
    earlier: tuple[str, ...] = ()  # models that served before the source, newest first
    retire_now: frozenset[str] = frozenset()  # units on disk nothing wants (stopped first)
    notes: tuple[str, ...] = field(default=())

    @property
    def switching(self) -> bool:
        return self.source is not None

    def rolled_back(self, why: str, at: float) -> ServingRecord:
        """The record after a failed switch: the source serves again."""
        return ServingRecord(
            current=self.source,
            previous=self.earlier,
            failed={"model": self.target, "why": why[:500], "at": int(at)},
        )

    def pending_record(self, now: float) -> ServingRecord:
        """The record while the old unit is stopped and the new one is not yet proven."""
        assert self.source is not None
        return ServingRecord(
            current=None,
            previous=self.earlier,
            pending=Pending(self.source, self.target, now),
        )


def plan_switch(
    record: ServingRecord,
    target: str,
    units_on_disk: list[str],
    active_units: list[str],
    co_served: set[str],
    keep_previous: int,
) -> SwitchPlan:
    """Decide the switch from the guest's record and its units.

    The source is, in order: the `from` of a pending (interrupted) switch, the recorded
    current model when it is another one and its unit is on disk, or, on a guest from
    before the record existed, another llmhost serving unit that is active.
    """
    notes: list[str] = []
    wanted_units = set().union(*(units_of(m) for m in co_served | {target}))
    source: str | None = None
    resumed = False
    if record.pending is not None and record.pending.source != target:
        source, resumed = record.pending.source, True
        notes.append(
            f"an earlier switch {record.pending.source} -> {record.pending.target} was "
            f"interrupted after {record.pending.source} stopped: finishing it now"
        )
    elif record.pending is not None:
        notes.append(f"an interrupted switch back to {target}: {target} is the target again")
    elif record.current and record.current != target and unit_name(record.current) in units_on_disk:
        source = record.current
    elif not record.current:
        others = [
            m
            for u in active_units
            if (m := model_of_unit(u)) and m != target and m not in co_served
        ]
        source = others[0] if others else None
    earlier = [p for p in record.previous if p not in (target, source) and p not in co_served]
    if record.pending is not None and record.pending.target not in (target, source):
        notes.append(f"{record.pending.target} never passed its proofs: its unit is removed")
    previous_after = ([source] if source else []) + earlier
    kept_previous = previous_after[:keep_previous]
    keep_now = wanted_units | set().union(*(units_of(m) for m in previous_after))
    keep_after = wanted_units | set().union(*(units_of(m) for m in kept_previous))
    on_disk = set(units_on_disk)
    committed = ServingRecord(current=target, previous=tuple(kept_previous))
    return SwitchPlan(
        target=target,
        source=source,
        resumed=resumed,
        keep_now=frozenset(keep_now & on_disk | wanted_units),
        retire_after=frozenset((on_disk & keep_now) - keep_after),
        retire_now=frozenset(on_disk - keep_now - wanted_units),
        committed=committed,
        earlier=tuple(earlier),
        notes=tuple(notes),
    )


def conflicts_with(target: str, co_served: set[str], servable: list[str]) -> list[str]:
    """Units the target's unit declares Conflicts= with: every other model's, and its own A/B.

    From the catalog, not from what is on disk, so the drop-in only changes when the
    catalog does (and a drop-in change reloads systemd, it never restarts the server).
    """
    others = [m for m in servable if m != target and m not in co_served]
    units = sorted(set().union(*(units_of(m) for m in others)) if others else set())
    return sorted({*units, ab_unit_name(target)} - {unit_name(target)})


def weights_to_prune(on_disk: list[str], keep: set[str]) -> list[str]:
    """Weights directories (and unfinished `.partial` copies) that no kept model uses."""
    return sorted(d for d in on_disk if d.removesuffix(".partial") not in keep)


def failed_before(record: ServingRecord, target: str) -> str | None:
    """Why a switch to `target` already failed and rolled back, None when it did not.

    A converge must not stop a working model for a load that failed its proofs last time
    (on Kimi each try is ~30 minutes of load and as long again to roll back): it asks for
    `retry_failed_switch=true` once the cause is fixed.
    """
    failed = record.failed or {}
    if failed.get("model") != target or record.current == target:
        return None
    at = failed.get("at")
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(at)) if isinstance(at, int) else "?"
    return f"{target} failed its proofs at {when} and was rolled back: {failed.get('why', '?')}"
