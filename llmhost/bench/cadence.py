"""When the load proofs (throughput gate, draft A/B) run: pure rules, unit-tested.

A converge that changed nothing must not load-test the server users are on: by default it
proves readiness and correctness only. The gate and the A/B run when the unit (re)started in
this run (its unit, env, venv or weights changed), when no passing gate is recorded for it,
when the last passing gate is older than verify.max_age_s, or when asked (verify=full).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Mode = Literal["auto", "full", "basic"]


@dataclass(frozen=True)
class LoadProofs:
    run: bool
    why: str


def age_text(seconds: float) -> str:
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


def load_proofs(
    mode: Mode, started: bool, last_pass: float | None, max_age_s: int, now: float
) -> LoadProofs:
    """Whether the gate runs now, and why (printed with the run)."""
    if mode == "basic":
        return LoadProofs(False, "verify.mode = basic: readiness and correctness only")
    if mode == "full":
        return LoadProofs(True, "asked for (verify.mode = full)")
    if started:
        return LoadProofs(True, "the unit (re)started in this run: unit, env, venv or weights")
    if last_pass is None:
        return LoadProofs(True, "no passing gate is recorded for this unit")
    age = max(0.0, now - last_pass)
    if age > max_age_s:
        return LoadProofs(
            True, f"the last passing gate is {age_text(age)} old (verify.max_age_s {max_age_s})"
        )
    return LoadProofs(
        False,
        f"nothing changed and the last passing gate is {age_text(age)} old: "
        "readiness and correctness only (verify=full runs it)",
    )


def draft_ab_runs(ab_mode: str, gate: LoadProofs) -> bool:
    """The A/B follows the gate ("on-change"), or is forced on ("always") or off ("never")."""
    return ab_mode == "always" or (ab_mode == "on-change" and gate.run)


def parse_last_pass(text: str | None) -> float | None:
    """The guest's record of the last passing gate (epoch seconds), None when absent."""
    try:
        return float((text or "").strip())
    except ValueError:
        return None
