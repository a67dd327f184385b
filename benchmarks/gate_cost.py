"""What the throughput gate costs a converge on the sandbox: seconds of wall time it adds.

`deploys/serve.py --data verify=full` (the gate on demand) against the same converge with
the load proofs off (`mode: basic`, readiness and correctness stay), interleaved, on the
converged guest: the difference of the medians is the gate's own time (its warm-up, its
measured runs, the confirmation when one is needed). Run it from two checkouts to compare
two gate methods on the same day (docs/benchmarks.md, "Gate cost").
"""

from __future__ import annotations

import json
import platform
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PYINFRA = str(Path(sys.executable).with_name("pyinfra"))
SERVE = ["inventory/sandbox.py", "deploys/serve.py", "--limit", "sandbox"]
RUNS = 3


def timed(*data: str) -> float:
    args = [PYINFRA, "-y", *SERVE]
    for item in data:
        args += ["--data", item]
    start = time.perf_counter()
    proc = subprocess.run(args, cwd=REPO, capture_output=True, text=True)
    took = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"serve.py {' '.join(data)} failed:\n{proc.stdout[-3000:]}")
    return took


def main() -> int:
    full = 'verify={"mode": "full", "draft_ab": "never"}'
    basic = 'verify={"mode": "basic"}'
    timed(basic)  # converged first: the measured runs are no-ops but for the proofs
    with_gate, without = [], []
    for _ in range(RUNS):
        with_gate.append(timed(full))
        without.append(timed(basic))
    gate_s = statistics.median(with_gate) - statistics.median(without)
    sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True)
    result = {
        "benchmark": "gate-cost",
        "time": datetime.now(UTC).isoformat(timespec="seconds"),
        "git_sha": sha.stdout.strip(),
        "machine": platform.node(),
        "runs": RUNS,
        "converge_with_gate_s": with_gate,
        "converge_without_gate_s": without,
        "gate_s": round(gate_s, 1),
    }
    out = REPO / "results" / "benchmarks"
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"gate-cost-{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(
        f"gate cost: {gate_s:.1f} s (converge with the gate {statistics.median(with_gate):.1f} s, "
        f"without {statistics.median(without):.1f} s; median of {RUNS}); saved {path}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
