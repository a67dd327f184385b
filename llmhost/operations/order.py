"""Ordering across hosts. pyinfra orders each host's operations, but two hosts' chains are
independent: it interleaves them. One operation called for every host from the same line
joins the chains, so everything before it (on any host) runs before anything after it."""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import operation
from pyinfra.api.command import PyinfraCommand


@operation()
def barrier(what: str) -> tuple[PyinfraCommand, ...]:
    """
    Changes nothing; every host's operations above it run before any host's below it. Its
    command list is empty by design: an ordering point, not a check or a change.

    + what: which steps it separates (shown as the operation's name)
    """
    host.noop(what)
    return ()
