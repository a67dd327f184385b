"""Downtime of a model switch on the sandbox, against a cold start of the same model by hand.

A client polls the guest's port (a one-token completion every 0.2 s) through
`deploys/serve.py --data served_model=<B>`; downtime runs from the last answer before the
switch to the first answer after it. Then B is stopped and started by hand (`systemctl
start`), polled the same way: that load is the floor a switch cannot beat. The ratio says
what the switch adds to one load (goal <= 1.10). The switch runs with verify=basic: the
load proofs come after the first answer and do not change the downtime.
"""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import requests

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from llmhost.bench.history import save_benchmark  # noqa: E402
from llmhost.proofs.readiness import auth_headers  # noqa: E402
from llmhost.testbed.sandbox import API_KEY_FILE, load_state, ssh_command  # noqa: E402

PYINFRA = str(Path(sys.executable).with_name("pyinfra"))
SERVE = ["inventory/sandbox.py", "deploys/serve.py"]
SOURCE, TARGET = "tiny-llama", "tiny-llama-alt"
GOAL = 1.10
POLL_S = 0.2


class Poller(threading.Thread):
    """One-token completions in a loop; the times of the answers that came back."""

    def __init__(self, url: str, headers: dict[str, str]) -> None:
        super().__init__(daemon=True)
        self.url, self.headers = url, headers
        self.answers: list[float] = []
        self.stop = threading.Event()

    def run(self) -> None:
        body = {"model": "tiny-llama", "prompt": "ping", "max_tokens": 1}
        while not self.stop.is_set():
            try:
                resp = requests.post(self.url, json=body, headers=self.headers, timeout=2)
                if resp.status_code == 200:
                    self.answers.append(time.time())
            except requests.RequestException:
                pass
            time.sleep(POLL_S)

    def longest_gap(self, after: float) -> float:
        times = [t for t in self.answers if t >= after]
        return max((b - a for a, b in zip(times, times[1:], strict=False)), default=0.0)


def deploy(*data: str) -> str:
    args = [PYINFRA, "-y", *SERVE, *[x for d in data for x in ("--data", d)]]
    proc = subprocess.run(args, cwd=REPO, capture_output=True, text=True)
    if proc.returncode != 0:
        # pyinfra's errors come before its results table, which fills the end of its output.
        lines = (proc.stdout + proc.stderr).splitlines()
        said = [line for line in lines if re.search(r"error|failed|timed out", line, re.I)]
        said = [line for line in said if not re.search(r"(\s+(\d+|-)){4}\s*$", line)]
        raise SystemExit(
            "\n".join(lines[-25:])
            + f"\n{' '.join(args)} failed (exit {proc.returncode}); its errors:\n"
            + "\n".join(said[-15:])
        )
    return proc.stdout + proc.stderr


def first_answer_after(poller: Poller, start: float, timeout: float = 600) -> float:
    deadline = time.time() + timeout
    while time.time() < deadline:
        later = [t for t in poller.answers if t > start]
        if later:
            return later[0]
        time.sleep(0.05)
    raise SystemExit(f"no answer within {timeout}s of the start")


def main() -> int:
    state = load_state()
    headers = auth_headers(API_KEY_FILE.read_text().strip())
    poller = Poller(f"http://{state.ip}:8000/v1/completions", headers)
    print(f"[switch_downtime] serving {SOURCE} first", flush=True)
    deploy("verify=basic")
    poller.start()
    time.sleep(2)
    begun = time.time()
    print(f"[switch_downtime] switch {SOURCE} -> {TARGET} with a client polling", flush=True)
    out = deploy(f"served_model={TARGET}", "verify=basic")
    time.sleep(1)
    switch_gap = poller.longest_gap(begun)
    reported = re.search(r"downtime \(last answer -> first answer\): ([\d.]+)s", out)

    print(f"[switch_downtime] cold start of {TARGET} by hand (systemctl start)", flush=True)
    ssh = ssh_command(Path(state.ssh_key))
    unit = f"llmhost-{TARGET}.service"
    subprocess.run([*ssh, f"systemctl stop {unit}"], check=True, timeout=120)
    time.sleep(1)
    started = time.time()
    subprocess.run([*ssh, f"systemctl start {unit}"], check=True, timeout=120)
    cold = first_answer_after(poller, started) - started
    poller.stop.set()
    print(f"[switch_downtime] serving {SOURCE} again", flush=True)
    deploy("verify=basic")

    ratio = switch_gap / cold
    verdict = "inside" if ratio <= GOAL else "OUTSIDE"
    print(
        f"switch downtime {switch_gap:.1f}s (deploy says {reported.group(1) if reported else '?'}"
        f"s), cold start by hand {cold:.1f}s: ratio {ratio:.2f} ({verdict} the goal {GOAL})"
    )
    path = save_benchmark(
        "switch-downtime",
        {
            "from": SOURCE,
            "to": TARGET,
            "downtime_s": round(switch_gap, 2),
            "deploy_reported_downtime_s": float(reported.group(1)) if reported else None,
            "cold_start_by_hand_s": round(cold, 2),
            "ratio": round(ratio, 3),
            "goal": GOAL,
            "poll_interval_s": POLL_S,
            "git_sha": subprocess.run(
                ["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True
            ).stdout.strip(),
            "date": datetime.now(UTC).isoformat(timespec="seconds"),
        },
        REPO / "results" / "benchmarks",
    )
    print(f"saved {path.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
