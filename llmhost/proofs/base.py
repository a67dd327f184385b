"""What every proof is handed, and how it fails.

Why callables and not pyinfra's host: the operation that runs a proof binds them to its host
at execution time (operations/verify.py); a unit test passes a recorder instead.
"""

from __future__ import annotations

import posixpath
import shlex
from collections.abc import Callable

# Run one shell command on the guest: (ok, stdout, stderr).
Shell = Callable[[str], tuple[bool, str, str]]
# Print one progress line under the host's prefix.
Log = Callable[[str], None]


class ProofFailed(Exception):
    """A proof's verdict is a failure; the message carries the figures that failed it."""


def no_shell(command: str) -> tuple[bool, str, str]:
    """The default where a proof was given no guest: saying so beats a silent pass."""
    raise ProofFailed(f"no guest shell to run: {command.split()[0] if command else command!r}")


def write_text_command(path: str, text: str) -> str:
    """A guest command that writes `text` and a newline to `path` atomically (a temp file,
    then rename), creating its directory: how llmhost's records on a guest are written."""
    q, tmp = shlex.quote, shlex.quote(path + ".tmp")
    parent = posixpath.dirname(path) or "."
    return f"mkdir -p {q(parent)} && printf '%s\\n' {q(text)} > {tmp} && mv -f {tmp} {q(path)}"
