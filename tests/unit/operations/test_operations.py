"""Every llmhost operation against its tables: facts and arguments in, commands (or the
no-op it says) out, one case a file in tests/operations/<operation>/<case>.json.

Why tables: an operation's whole job is the decision from facts to commands, and a
converged host must get none. A table a case makes each decision visible and reviewable
as data, and adding a case is adding a file. The coverage test keeps it whole: a new
`@operation` without its tables fails the unit phase.

A case's keys:
    why          what the case shows (required: a table is read by people)
    args         the operation's keyword arguments, as JSON
    args_factory optional: a name in factories.ARGS_FACTORIES that builds objects from args
    facts        fact class name -> answer; for a fact read with arguments, a mapping of
                 `name=value[, name=value]` (harness.fact_key) -> answer
    commands     what it yields, rendered (harness.render); [] for no change
    noops        the no-op descriptions it gives (default [])
    said         the lines it says while deciding (default [])
    known_bug    optional: why the operation does not do what the case expects yet; the
                 case holds the right answer and fails strictly (xfail) until it is fixed
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path
from typing import Any

import pytest

from tests.unit.operations.factories import ARGS_FACTORIES, FACT_DECODERS
from tests.unit.operations.harness import REPO, TABLES, case_files, load_case, run_operation

OPERATIONS_DIR = REPO / "llmhost" / "operations"
DECORATED = re.compile(r"^@operation\b[^\n]*\ndef (\w+)\(", re.M)
KEYS = {"why", "args", "args_factory", "facts", "commands", "noops", "said", "known_bug"}
MIN_CASES = 2


def operations() -> dict[str, str]:
    """Every `@operation` in llmhost/operations, read from the source (as a reviewer would
    grep for it), by name -> its module."""
    found: dict[str, str] = {}
    for path in sorted(OPERATIONS_DIR.glob("*.py")):
        for name in DECORATED.findall(path.read_text()):
            assert name not in found, f"two operations named {name}: the tables need one"
            found[name] = f"llmhost.operations.{path.stem}"
    return found


OPERATIONS = operations()


def case_param(path: Path) -> Any:
    """A table as a test parameter; one with a known bug expected to fail, strictly, so
    that the fix has to remove the mark (and the bug stays listed until then)."""
    bug = load_case(path).get("known_bug")
    marks = [pytest.mark.xfail(reason=bug, strict=True)] if bug else []
    return pytest.param(path, id=f"{path.parent.name}/{path.stem}", marks=marks)


@pytest.mark.parametrize("path", [case_param(p) for p in case_files()])
def test_the_operation_yields_what_its_table_says(path: Path) -> None:
    case = load_case(path)
    assert set(case) <= KEYS, f"unknown keys {set(case) - KEYS}"
    assert case.get("why"), "a case says why it is there"
    name = path.parent.name
    assert name in OPERATIONS, f"{name} is no @operation in llmhost/operations"
    op: Any = getattr(importlib.import_module(OPERATIONS[name]), name)
    args = case.get("args", {})
    if "args_factory" in case:
        args = ARGS_FACTORIES[case["args_factory"]](args)
    out = run_operation(op, args, case.get("facts", {}), FACT_DECODERS)
    assert out.commands == case["commands"]
    assert out.noops == case.get("noops", [])
    assert out.said == case.get("said", [])


def test_every_operation_has_its_tables() -> None:
    """At least two cases each (one converged, one that changes something), and no table
    for an operation that no longer exists."""
    counts = {name: 0 for name in OPERATIONS}
    for path in case_files():
        assert path.parent.name in counts, f"{path.relative_to(REPO)}: no such operation"
        counts[path.parent.name] += 1
    thin = sorted(name for name, n in counts.items() if n < MIN_CASES)
    assert not thin, f"operations with fewer than {MIN_CASES} cases in {TABLES}: {thin}"


def test_the_operations_are_found() -> None:
    """The source scan is what the coverage test rests on: it must see the known ones."""
    assert {"atomic_file", "barrier", "staged", "switch_commit", "uv_tool"} <= set(OPERATIONS)
    assert len(OPERATIONS) >= 25
