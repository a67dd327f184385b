"""The stand-in's `pct status/start` of guests 201 and 202, answered by the sandbox's containers.

Why: "a rebooted Proxmox host gets every guest back" can only be tested when the stand-in's
`pct start 201` (or 202, the fleet's second guest) starts a real guest. The stand-in is a
container beside the sandbox, not its parent, so it cannot start it. This loop runs on the
machine (started by `standin up`, ended by `standin down`, by PID): every second it writes
each mapped container's state ("running" or "stopped") into <vmid>.bridge under the stand-in's
/var/lib/llmhost-standin/guests, and it starts the container when the stand-in's `pct start`
leaves a <vmid>.start request there (llmhost/testbed/shims/proxmox-guest). Nothing else
crosses.

    python -m llmhost.testbed.guest_bridge <stand-in rootfs> <vmid>=<container> ...
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from llmhost.wait import until

GUESTS_DIR = "var/lib/llmhost-standin/guests"
START_TIMEOUT_S = 60


def container_state(name: str) -> str:
    proc = subprocess.run(
        ["lxc-info", "-n", name, "-s", "-H"], capture_output=True, text=True, timeout=20
    )
    return "running" if proc.stdout.strip() == "RUNNING" else "stopped"


def write_state(path: Path, state: str) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(state + "\n")
    tmp.replace(path)


def start(name: str) -> None:
    subprocess.run(["lxc-start", "-n", name, "-d"], capture_output=True, timeout=60)
    until(lambda: container_state(name) == "running", START_TIMEOUT_S)


def serve(rootfs: Path, mapping: dict[int, str]) -> None:
    guests = rootfs / GUESTS_DIR
    while True:
        if guests.parent.parent.exists():  # the stand-in's disk is there (not destroyed)
            guests.mkdir(parents=True, exist_ok=True)
            for vmid, name in mapping.items():
                request = guests / f"{vmid}.start"
                if request.exists():
                    start(name)
                    request.unlink(missing_ok=True)
                write_state(guests / f"{vmid}.bridge", container_state(name))
        time.sleep(1)


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    mapping = {int(v): name for v, _, name in (arg.partition("=") for arg in argv[1:])}
    try:
        serve(Path(argv[0]), mapping)
    except KeyboardInterrupt:
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
