"""Puts the checkout first on sys.path, so `llmhost` and `tests.helpers` import from it.

Shared helpers live in tests/helpers.py; fixtures in the conftest.py of each test directory.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
