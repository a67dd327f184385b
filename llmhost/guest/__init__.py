"""Scripts uploaded to a guest and run there with its own Python (stdlib, or the vLLM venv).

Each file here stands alone: it imports nothing from llmhost (a unit test parses every file
and fails on such an import), because a guest has no llmhost installed. The control side
only needs their local paths, which `script()` gives.
"""

from pathlib import Path

GUEST_DIR = Path(__file__).resolve().parent


def script(name: str) -> Path:
    """Local path of a guest script, e.g. script("gpu_free.py")."""
    path = GUEST_DIR / name
    if not path.is_file():
        raise FileNotFoundError(f"no guest script {name!r} in {GUEST_DIR}")
    return path
