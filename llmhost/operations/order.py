"""Ordering across hosts. pyinfra orders each host's operations, but two hosts' chains are
independent: it interleaves them. One operation called for every host from the same line
joins the chains, so everything before it (on any host) runs before anything after it."""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import operation

from llmhost.operations.failure import fails_its_host


@operation()
@fails_its_host
def barrier(what: str):
    """
    Changes nothing; every host's operations above it run before any host's below it.

    + what: which steps it separates (shown as the operation's name)
    """
    host.noop(what)
    yield from ()
