"""The shape of the package, checked on its source: no import cycle, guest scripts that stand
alone, product code that does not know the test bed, and short deploy steps."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "llmhost"
# Drivers of the test bed: `llmhost sandbox|standin ...` lives in the CLI.
TESTBED_DRIVERS = {"llmhost.cli"}


def module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


MODULES = {module_name(p): p for p in PACKAGE.rglob("*.py")}


def imported(name: str, path: Path) -> set[str]:
    """llmhost modules that `name` imports (an imported name resolves to its module)."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            candidates = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            candidates = [base] + [f"{base}.{a.name}" for a in node.names]
        else:
            continue
        for cand in candidates:
            while cand and cand not in MODULES:
                cand = cand.rpartition(".")[0]
            if cand and cand != name and not name.startswith(cand + "."):
                found.add(cand)
    return found


GRAPH = {name: imported(name, path) for name, path in MODULES.items()}


def test_there_is_no_import_cycle_among_llmhost_modules() -> None:
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for dep in sorted(GRAPH[node]):
            if state.get(dep) == 1:
                cycle = path[path.index(dep) :] + [dep] if dep in path else [node, dep]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if dep not in state:
                visit(dep, [*path, dep])
        state[node] = 2

    for name in sorted(GRAPH):
        if name not in state:
            visit(name, [name])


def test_the_cycle_check_finds_a_cycle_when_there_is_one() -> None:
    # The check above must be able to fail: two modules that import each other.
    fake = {"a": {"b"}, "b": {"a"}}
    with pytest.raises(pytest.fail.Exception, match="import cycle"):
        state: dict[str, int] = {}

        def visit(node: str) -> None:
            state[node] = 1
            for dep in fake[node]:
                if state.get(dep) == 1:
                    pytest.fail(f"import cycle: {node} -> {dep}")
                if dep not in state:
                    visit(dep)
            state[node] = 2

        visit("a")


GUEST_SCRIPTS = sorted((PACKAGE / "guest").glob("*.py"))


@pytest.mark.parametrize("script", [p for p in GUEST_SCRIPTS if p.name != "__init__.py"], ids=str)
def test_a_guest_script_imports_nothing_from_llmhost(script: Path) -> None:
    for node in ast.walk(ast.parse(script.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = ["llmhost"] if node.level else [node.module or ""]
        else:
            continue
        bad = [n for n in names if n.split(".")[0] == "llmhost"]
        assert not bad, f"{script.name} imports {bad}: a guest has no llmhost installed"


def test_every_script_uploaded_to_a_guest_lives_in_llmhost_guest() -> None:
    names = {p.name for p in GUEST_SCRIPTS}
    assert {"gpu_free.py", "refcheck.py", "gguf_import.py", "tinymodels.py"} <= names


def test_product_code_imports_nothing_from_the_test_bed() -> None:
    offenders = {
        name: sorted(d for d in deps if d.startswith("llmhost.testbed"))
        for name, deps in GRAPH.items()
        if not name.startswith("llmhost.testbed") and name not in TESTBED_DRIVERS
    }
    assert not {k: v for k, v in offenders.items() if v}


@pytest.mark.parametrize("sub", ["operations", "tasks"])
def test_deploy_steps_are_short(sub: str) -> None:
    long = []
    for path in sorted((PACKAGE / sub).glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = node.end_lineno - node.lineno + 1  # type: ignore[operator]
                if lines > 60:
                    long.append(f"{path.name}:{node.name} ({lines} lines)")
    assert not long, long
