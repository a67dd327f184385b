"""Regression drill: a server that got slower must fail the throughput gate.

The catalog's tiny-llama figures (60 / 250 tok/s) sit ten times below what the sandbox
serves, so alone they pass a server at a quarter of its speed. The gate's floor is the
higher of the catalog figure and this host's own baseline (the first passing run sets it):
here the same unit, throttled on the guest to a quarter of the CPU time (SIGSTOP 0.3 s,
SIGCONT 0.1 s, in a loop), must fail it, printing measured against the host baseline.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

from llmhost.config.guest import GuestConfig
from llmhost.testbed.sandbox import SandboxState
from tests.helpers import SERVE, guest_sh, pyinfra

UNIT = "llmhost-tiny-llama.service"
PIDFILE = "/run/llmhost-drill-throttle.pid"
THROTTLE = (
    f"echo $$ > {PIDFILE}; while :; do systemctl kill -s STOP {UNIT}; sleep 0.3; "
    f"systemctl kill -s CONT {UNIT}; sleep 0.1; done"
)


@contextmanager
def throttled(sandbox: SandboxState) -> Iterator[None]:
    """The serving unit runs a quarter of the time while the test runs; whole again after."""
    guest_sh(sandbox, f"setsid -f sh -c '{THROTTLE}' </dev/null >/dev/null 2>&1")
    try:
        yield
    finally:
        guest_sh(sandbox, f"kill $(cat {PIDFILE}) && rm -f {PIDFILE}", check=False)
        guest_sh(sandbox, f"systemctl kill -s CONT {UNIT}", check=False)


def gate_lines(output: str) -> list[tuple[float, float, str]]:
    """(measured, floor, the rest) of each printed throughput line."""
    pattern = r"throughput c=\d+: ([\d.]+) output tok/s vs baseline [\d.]+ \(floor ([\d.]+)(.*)"
    return [(float(m), float(f), rest) for m, f, rest in re.findall(pattern, output)]


def test_a_throttled_server_fails_the_gate_on_the_hosts_own_baseline(
    served: GuestConfig, sandbox: SandboxState
) -> None:
    first = pyinfra(*SERVE, "--data", "verify=full")
    assert first.rc == 0, first.tail()
    assert "host baseline" in first.output, first.tail()  # used, or set by this first pass
    with throttled(sandbox):
        slow = pyinfra(*SERVE, "--data", "verify=full")
    # Whole again, the same server passes: the last gate on record is a pass again.
    again = pyinfra(*SERVE, "--data", "verify=full")
    assert again.rc == 0, again.tail()
    assert slow.rc != 0, slow.tail()
    assert "throughput below baseline for tiny-llama" in slow.output, slow.tail()
    lines = gate_lines(slow.output)
    failed = [(m, f, rest) for m, f, rest in lines if "BELOW BASELINE" in rest]
    assert failed and all("host baseline of" in rest for _, _, rest in failed), lines
    # The catalog's figure alone would have passed this server: the host baseline caught it.
    tolerance = served.profile.bench.tolerance if served.profile.bench else 0.5
    catalog = [(m, float(re.findall(r"catalog ([\d.]+)", rest)[0])) for m, _, rest in failed]
    assert any(m >= c * (1 - tolerance) for m, c in catalog), catalog
