"""The engines are plain Python: importing every module of llmhost/proofs, llmhost/switch and
llmhost/fleet loads no pyinfra, so they run (and are tested) without pyinfra's state, and the
operations stay adapters."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import llmhost

ENGINES = ("proofs", "switch", "fleet")


def test_no_module_of_the_engines_imports_pyinfra() -> None:
    root = Path(llmhost.__file__).parent
    modules = sorted(f"llmhost.{e}.{p.stem}" for e in ENGINES for p in (root / e).glob("*.py"))
    assert {"llmhost.proofs.load", "llmhost.switch.guard", "llmhost.fleet.roll"} <= set(modules)
    code = (
        "import importlib, sys\n"
        f"for name in {modules!r}: importlib.import_module(name)\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'pyinfra'))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout
