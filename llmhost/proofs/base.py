"""What every proof is handed, and how it fails.

Why callables and not pyinfra's host: the operation that runs a proof binds them to its host
at execution time (operations/verify.py); a unit test passes a recorder instead.
"""

from __future__ import annotations

import posixpath
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

# Run one shell command on the guest: (ok, stdout, stderr).
Shell = Callable[[str], tuple[bool, str, str]]
# Print one progress line under the host's prefix.
Log = Callable[[str], None]


def frozen(value: Any) -> Any:
    """`value` with every dict made a read-only mapping and every list a tuple, all the way
    down: a verdict's figures cannot be changed by whoever it is handed to."""
    if isinstance(value, Mapping):
        return MappingProxyType({k: frozen(v) for k, v in value.items()})
    if isinstance(value, list | tuple):
        return tuple(frozen(v) for v in value)
    return value


@dataclass(frozen=True)
class Verdict:
    """What one proof concluded, fixed once reached: which proof, of what, whether it
    passed, the lines that say why and the figures behind them (read-only). A passing proof
    returns its verdict; a failing one raises `ProofFailed` carrying it, because a failure
    must stop the switch's next step wherever it is raised from (guard.py rolls back on it).
    """

    proof: str  # "readiness", "correctness", "correctness under traffic", "load proofs"
    subject: str  # the model (or unit) proven
    passed: bool
    lines: tuple[str, ...]
    figures: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    def __post_init__(self) -> None:
        object.__setattr__(self, "lines", tuple(self.lines))
        object.__setattr__(self, "figures", frozen(dict(self.figures)))

    def text(self) -> str:
        """The verdict as one line."""
        return "; ".join(self.lines)


class ProofFailed(Exception):
    """A proof's verdict is a failure; the message carries the figures that failed it, and
    `verdict` the failed proof's Verdict where one was reached (None: the proof could not
    run, e.g. a server that did not answer)."""

    def __init__(self, message: str, verdict: Verdict | None = None) -> None:
        super().__init__(message)
        self.verdict = verdict


def no_shell(command: str) -> tuple[bool, str, str]:
    """The default where a proof was given no guest: saying so beats a silent pass."""
    raise ProofFailed(f"no guest shell to run: {command.split()[0] if command else command!r}")


def remove_command(paths: tuple[str, ...] | list[str]) -> str:
    """A guest command that removes `paths`, those absent included."""
    return "rm -f " + " ".join(shlex.quote(p) for p in paths)


def write_text_command(path: str, text: str) -> str:
    """A guest command that writes `text` and a newline to `path` atomically (a temp file,
    then rename), creating its directory: how llmhost's records on a guest are written."""
    q, tmp = shlex.quote, shlex.quote(path + ".tmp")
    parent = posixpath.dirname(path) or "."
    return f"mkdir -p {q(parent)} && printf '%s\\n' {q(text)} > {tmp} && mv -f {tmp} {q(path)}"
