"""Retiring a unit disables it only when systemd holds links for it: `systemctl disable` of a
static or disabled unit changes nothing yet reloads systemd, which once took a guest's whole
180 s timeout. The fact's command and parsing, and the rule that reads it."""

from __future__ import annotations

import subprocess

import pytest

from llmhost.facts.files import UnitFileState, needs_disable


@pytest.mark.parametrize(
    ("state", "expected"),
    [
        ("enabled", True),
        ("enabled-runtime", True),
        ("linked", True),
        ("linked-runtime", True),
        ("static", False),
        ("disabled", False),
        ("masked", False),
        ("masked-runtime", False),
        ("generated", False),
        ("indirect", False),
        ("", False),
    ],
)
def test_disable_runs_only_for_a_unit_with_links(state: str, expected: bool) -> None:
    assert needs_disable(state) is expected


def test_the_fact_reads_one_value_and_an_absent_unit_as_empty() -> None:
    fact = UnitFileState()
    assert fact.process(["enabled\n"]) == "enabled"
    assert fact.process([]) == UnitFileState.default() == ""
    assert not needs_disable(fact.process([]))


def test_a_unit_name_reaches_systemctl_as_one_quoted_word() -> None:
    """A name with a space or `;` must not split or run anything: dash parses the command,
    with `systemctl` replaced by a function that prints its arguments one per line."""
    command = UnitFileState().command(unit="llmhost-a b;true.service")
    printed = subprocess.run(
        ["dash", "-c", 'systemctl() { printf "%s\\n" "$@"; }; ' + command],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    assert printed == ["show", "-p", "UnitFileState", "--value", "llmhost-a b;true.service"]
