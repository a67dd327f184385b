"""Every rule of the load proofs' cadence (issue: a converge that changed nothing stays cheap)."""

from __future__ import annotations

import pytest

from llmhost.bench.cadence import LoadProofs, draft_ab_runs, load_proofs, parse_last_pass
from llmhost.config.guest import GuestConfig
from llmhost.config.loading import validate

NOW = 1_800_000_000.0
DAY = 86400


@pytest.mark.parametrize(
    ("mode", "started", "last_pass", "runs", "why"),
    [
        (
            "auto",
            False,
            NOW - 3600,
            False,
            "nothing changed and the last passing gate is 1.0 h old",
        ),
        ("auto", True, NOW - 3600, True, "the unit (re)started in this run"),
        ("auto", False, None, True, "no passing gate is recorded"),
        ("auto", False, NOW - 8 * DAY, True, "the last passing gate is 8.0 days old"),
        ("auto", False, NOW - 7 * DAY + 60, False, "nothing changed"),
        ("full", False, NOW - 60, True, "asked for (verify.mode = full)"),
        ("basic", True, None, False, "verify.mode = basic"),
    ],
)
def test_load_proofs_rules(
    mode: str, started: bool, last_pass: float | None, runs: bool, why: str
) -> None:
    decision = load_proofs(mode, started, last_pass, 7 * DAY, NOW)  # type: ignore[arg-type]
    assert decision.run is runs
    assert why in decision.why


@pytest.mark.parametrize(
    ("ab_mode", "gate_runs", "runs"),
    [
        ("on-change", True, True),
        ("on-change", False, False),
        ("always", False, True),
        ("never", True, False),
    ],
)
def test_the_draft_ab_follows_the_gate_unless_forced(
    ab_mode: str, gate_runs: bool, runs: bool
) -> None:
    assert draft_ab_runs(ab_mode, LoadProofs(gate_runs, "x")) is runs


def test_the_guest_record_is_read_or_absent() -> None:
    assert parse_last_pass("1799999000\n") == 1799999000.0
    assert parse_last_pass(None) is None and parse_last_pass("garbage") is None


def test_verify_full_is_a_shorthand_for_the_mode() -> None:
    data = {
        "host_profile": "sandbox",
        "accelerator": "cpu",
        "gpu_count": 0,
        "catalogs": ("testbed",),
        "served_model": "tiny-llama",
        "vllm": {"version": "0.32.0"},
    }
    cfg = validate(GuestConfig, "g", {**data, "verify": "full"})
    assert cfg.verify.mode == "full" and cfg.verify.max_age_s == 7 * DAY
    assert validate(GuestConfig, "g", data).verify.mode == "auto"
