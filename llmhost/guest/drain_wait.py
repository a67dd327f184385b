"""Wait until a vLLM server has no request in flight: the drain of a vLLM without
`--shutdown-timeout` (before 0.18), run by its unit as ExecStop=.

Such a vLLM aborts every request in flight on SIGTERM. systemd runs ExecStop= first and
sends the signal only when it returns, so this wait lets the streams already running finish,
for at most --timeout seconds. A server that does not answer (stopped already, crashed, still
loading) is not waited for. Unlike vLLM's own drain, the server still admits new requests
during the wait (before 0.18 it has no way to refuse them): on one box a request arriving
then is served if the server empties in time; in a fleet the roll takes the replica out of
the router first, so none arrive.

    python3 drain_wait.py --url http://10.0.0.5:8000/metrics --timeout 60 [--every 0.5]

Runs on the guest with the system python3 (stdlib only), imports nothing from llmhost; its
exit status is always 0, so that a stop never fails on it. What it waited for goes to stdout
(the unit's journal).
"""

from __future__ import annotations

import argparse
import re
import sys
import time
import urllib.request

IN_FLIGHT = re.compile(
    r"^vllm:num_requests_(running|waiting)(\{[^}]*\})?\s+([0-9.eE+-]+)\s*$", re.MULTILINE
)


def in_flight(metrics_text: str) -> int | None:
    """Requests running plus waiting, summed over the server's models; None without gauges
    (or with one that is not a number)."""
    try:
        values = [float(m.group(3)) for m in IN_FLIGHT.finditer(metrics_text)]
    except ValueError:
        return None
    return round(sum(values)) if values else None


# Straight to the server: the unit's environment may name a proxy (for the weights' hub).
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def read_metrics(url: str, timeout_s: float = 3.0) -> str | None:
    """The server's /metrics text, or None when it does not answer (whatever the error)."""
    try:
        with OPENER.open(url, timeout=timeout_s) as reply:
            return reply.read().decode("utf-8", "replace")
    except Exception:  # noqa: BLE001 - a stop must never fail on its drain
        return None


def drain(url: str, timeout_s: float, every_s: float = 0.5) -> str:
    """Wait while requests are in flight, at most timeout_s; what happened, in one line."""
    start = time.monotonic()
    first: int | None = None
    while True:
        text = read_metrics(url)
        left = in_flight(text) if text is not None else None
        waited = time.monotonic() - start
        if left is None:
            return f"drain: {url} does not answer with its gauges: not waited for"
        if first is None:
            first = left
        if left == 0:
            return f"drain: {first} request(s) in flight at the stop, none after {waited:.1f} s"
        if waited >= timeout_s:
            return f"drain: {left} request(s) still in flight after {timeout_s:.0f} s: stopping"
        time.sleep(every_s)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True, help="the server's /metrics")
    parser.add_argument("--timeout", type=float, required=True, help="seconds, at most")
    parser.add_argument("--every", type=float, default=0.5, help="seconds between reads")
    args = parser.parse_args(argv)
    try:
        print(drain(args.url, args.timeout, args.every), flush=True)
    except Exception as e:  # noqa: BLE001 - a stop must never fail on its drain
        print(f"drain: gave up ({type(e).__name__}: {e}): stopping", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
