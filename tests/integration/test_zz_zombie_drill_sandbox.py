"""The SIGKILL drill on the sandbox: vLLM started outside its unit (as from a tmux shell),
its API server SIGKILLed, the engine and worker survive as orphans of PID 1; deploys/cleanup.py
finds and kills them, the port is free, and the service comes back through serve.py."""

from __future__ import annotations

import shlex
import time

from llmhost.config.loading import load_guest
from llmhost.inventory import get_host
from llmhost.readiness import probe_once
from llmhost.render import unit_paths, vllm_command
from llmhost.testbed.sandbox import SandboxState
from tests.integration.conftest import guest_sh as sh
from tests.integration.conftest import pyinfra

ORPHANS = "ps -eo pid=,ppid=,comm= | awk '$2==1 && $3 ~ /^VLLM::/ {print $1, $3}'"


def test_sigkilled_server_leaves_orphans_that_cleanup_kills(sandbox: SandboxState) -> None:
    cfg = load_guest(get_host("inventory/sandbox.py", sandbox.ip))
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
            "> /tmp/llmhost-drill.log 2>&1 "
            "< /dev/null &"
        ),
    )
    deadline = time.monotonic() + 420
    while not probe_once(base, str(cfg.profile.served_name)).ready:
        started = sh(sandbox, f"pgrep -u {cfg.service_user} -c -f vllm-entry", check=False)
        log = sh(sandbox, "grep -E 'Error|error' /tmp/llmhost-drill.log | tail -5", check=False)
        assert started not in ("", "0") and time.monotonic() < deadline, log
        time.sleep(3)
    api = sh(sandbox, f"pgrep -u {cfg.service_user} -f -o vllm-entry")
    sh(sandbox, f"kill -KILL {api}")
    time.sleep(5)
    orphans = sh(sandbox, ORPHANS)
    assert "VLLM::EngineCor" in orphans, f"no orphaned engine after SIGKILL: {orphans!r}"

    run = pyinfra("inventory/sandbox.py", "deploys/cleanup.py")
    assert run.rc == 0, run.tail()
    assert "orphaned vLLM process (parent is PID 1)" in run.output, run.tail()
    assert sh(sandbox, ORPHANS) == ""
    assert sh(sandbox, "pgrep -u vllm -c . || true") in ("", "0")
    assert f":{cfg.port} " not in sh(sandbox, "ss -ltn")

    run = pyinfra("inventory/sandbox.py", "deploys/serve.py")
    assert run.rc == 0, run.tail()
    assert probe_once(base, str(cfg.profile.served_name)).ready
