"""Integration tests run the real deploys against the sandbox guest (make sandbox-up)."""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from llmhost.testbed.sandbox import STATE_DIR, SandboxState, load_state, ssh_command

REPO = Path(__file__).resolve().parents[2]
PYINFRA = str(Path(sys.executable).with_name("pyinfra"))


@dataclass
class Run:
    rc: int
    output: str
    seconds: float

    def tail(self, n: int = 60) -> str:
        return "\n".join(self.output.splitlines()[-n:])


def pyinfra(*args: str, timeout: int = 1500) -> Run:
    """Run pyinfra like a user does; keep the whole log under .sandbox/logs/."""
    logs = STATE_DIR / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    proc = subprocess.run(
        [PYINFRA, "-y", *args], cwd=REPO, text=True, capture_output=True, timeout=timeout
    )
    out = proc.stdout + proc.stderr
    (logs / f"pyinfra-{int(time.time())}.log").write_text(out)
    return Run(proc.returncode, out, time.monotonic() - start)


def guest_sh(sandbox: SandboxState, command: str, check: bool = True) -> str:
    """Run a shell command in the sandbox guest over ssh; its stdout, stripped."""
    return subprocess.run(
        ssh_command(Path(sandbox.ssh_key)) + [command],
        text=True,
        capture_output=True,
        check=check,
        timeout=120,
    ).stdout.strip()


@pytest.fixture(scope="session")
def sandbox() -> SandboxState:
    return load_state()  # raises with "run make sandbox-up first" when there is none
