"""Rewrite tests/golden/ from what the code renders now (`make golden`); tests only compare.

Run it after a reviewed change to a renderer, then review `git diff tests/golden`. It prints
each file it wrote and each golden file nothing renders any more (left in place).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.chdir(REPO)

from tests.helpers import GOLDEN, golden_on_disk, render_golden  # noqa: E402


def main() -> int:
    rendered = render_golden()
    written = 0
    for name, text in sorted(rendered.items()):
        path = GOLDEN / name
        before = path.read_text(encoding="utf-8") if path.exists() else None
        if before == text:
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        written += 1
        print(f"{'new' if before is None else 'changed'}: tests/golden/{name}")
    for name in golden_on_disk():
        if name not in rendered:
            print(f"not rendered by anything (remove it?): tests/golden/{name}")
    if written:
        print(f"{written} of {len(rendered)} golden files written; review: git diff tests/golden")
    else:
        print(f"no change: all {len(rendered)} golden files match what the code renders")
    return 0


if __name__ == "__main__":
    sys.exit(main())
