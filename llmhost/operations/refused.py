"""A host this run cannot converge from its live state: one operation in place of its others.

Why: a check of a host's live state (a foreign server on its port, a full models disk, a
driver other than the pin, a switch that failed before) used to raise while pyinfra prepared,
and an exception then ends the run for every host: one guest with a stale process kept the
whole site from being rebuilt. Now the deploy adds `host_refused` instead of the host's
operations: nothing on that host changes, it fails when the run gets there (exit non-zero),
and the other hosts converge. The refusal is said when it is decided (so `--dry` shows it)
and again in the run's last lines, one per refused host. Bad group_data still stops the whole
run (llmhost/config/loading.py): a data error is the site's, not a host's.
"""

from __future__ import annotations

import atexit
import sys

from pyinfra import host, logger
from pyinfra.api import operation

from llmhost.operations.step import refusal

# (host, why) of each host refused in this process, for the run's last lines.
REFUSED: list[tuple[str, str]] = []


def summary_lines(refused: list[tuple[str, str]]) -> list[str]:
    """The run's closing lines: each refused host and the first line of why."""
    if not refused:
        return []
    lines = [f"--> {len(refused)} host(s) refused, nothing changed on them:"]
    lines += [f"    {name}: {why.splitlines()[0]}" for name, why in refused]
    return lines


def _say_refusals() -> None:
    for line in summary_lines(REFUSED):
        print(line, file=sys.stderr, flush=True)


@operation()
def host_refused(message: str):
    """
    This host is not converged: it fails with `message` when the run gets here, the run's
    other hosts go on. The deploy adds it instead of this host's operations, so nothing on
    the host changes.

    + message: why, and what to do about it
    """
    yield refusal(message)


def refuse_host(what: str, message: str) -> None:
    """Add `host_refused` for this host, say so now (also under --dry) and at the run's end."""
    logger.warning(f"{host.print_prefix}REFUSED ({what}): {message}")
    if not REFUSED:
        atexit.register(_say_refusals)
    REFUSED.append((host.name, message))
    host_refused(name=f"refused: {what}", message=message)
