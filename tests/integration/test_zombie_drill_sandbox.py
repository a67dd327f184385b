"""The SIGKILL drill on the sandbox: vLLM started outside its unit (as from a tmux shell),
its API server SIGKILLed, the engine and worker survive as orphans of PID 1; deploys/cleanup.py
finds and kills them, the port is free, and the service comes back through serve.py.

Needs the default model served (the `served` fixture); whatever the drill leaves behind when
it fails is cleaned up and the default served again (`drill_leaves_nothing_behind`).
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Iterator

import pytest

from llmhost.config.guest import GuestConfig
from llmhost.proofs.readiness import probe_once
from llmhost.render import unit_paths, vllm_command
from llmhost.testbed.sandbox import SandboxState
from tests.helpers import BASIC, SERVE, api_headers, pyinfra, serve_default
from tests.helpers import guest_sh as sh

CLEANUP = ("inventory/sandbox.py", "deploys/cleanup.py")
ORPHANS = "ps -eo pid=,ppid=,comm= | awk '$2==1 && $3 ~ /^VLLM::/ {print $1, $3}'"
DRILL_LOG = "/tmp/llmhost-drill.log"


@pytest.fixture
def drill_leaves_nothing_behind(sandbox: SandboxState, served: GuestConfig) -> Iterator[None]:
    yield
    unit = unit_paths(served, served.served_model).unit_name
    active = sh(sandbox, f"systemctl is-active {unit}", check=False) == "active"
    if not active or sh(sandbox, ORPHANS, check=False):
        # The drill stopped before its own cleanup: free the port from the hand-started vLLM.
        assert pyinfra(*CLEANUP).rc == 0
    serve_default(sandbox)


@pytest.mark.usefixtures("drill_leaves_nothing_behind")
def test_sigkilled_server_leaves_orphans_that_cleanup_kills(
    sandbox: SandboxState, served: GuestConfig
) -> None:
    cfg = served
    paths = unit_paths(cfg, cfg.served_model)
    base = f"http://{sandbox.ip}:{cfg.port}"
    sh(sandbox, f"systemctl stop {paths.unit_name}")
    user = cfg.service_user
    argv = " ".join(shlex.quote(a) for a in vllm_command(cfg, cfg.served_model, cfg.port))
    sh(
        sandbox,
        (
            f"cd {cfg.root_dir}/state; set -a; . {paths.env_file}; set +a; "
            f"export HOME=/var/lib/llmhost USER={user} LOGNAME={user}; "
            f"setsid setpriv --reuid {user} --regid {user} --init-groups {argv} "
            f"> {DRILL_LOG} 2>&1 "
            "< /dev/null &"
        ),
    )
    deadline = time.monotonic() + 420
    served_name = str(cfg.profile.served_name)
    # The hand-started vLLM reads the unit's env file too, VLLM_API_KEY included.
    while not probe_once(base, served_name, headers=api_headers()).ready:
        started = sh(sandbox, f"pgrep -u {cfg.service_user} -c -f vllm-entry", check=False)
        log = sh(sandbox, f"grep -E 'Error|error' {DRILL_LOG} | tail -5", check=False)
        assert started not in ("", "0") and time.monotonic() < deadline, log
        time.sleep(3)
    api = sh(sandbox, f"pgrep -u {cfg.service_user} -f -o vllm-entry")
    sh(sandbox, f"kill -KILL {api}")
    time.sleep(5)
    orphans = sh(sandbox, ORPHANS)
    assert "VLLM::EngineCor" in orphans, f"no orphaned engine after SIGKILL: {orphans!r}"

    run = pyinfra(*CLEANUP)
    assert run.rc == 0, run.tail()
    assert "orphaned vLLM process (parent is PID 1)" in run.output, run.tail()
    assert sh(sandbox, ORPHANS) == ""
    assert sh(sandbox, "pgrep -u vllm -c . || true") in ("", "0")
    assert f":{cfg.port} " not in sh(sandbox, "ss -ltn")

    run = pyinfra(*SERVE, *BASIC)  # the unit comes back, proven; the gate has its module
    assert run.rc == 0, run.tail()
    assert probe_once(base, served_name, headers=api_headers()).ready
