"""Run one operation against a table of facts and render what it yields as plain text.

Why: an operation is the part of a deploy that decides, from facts, what to run. Its
generator (`op._inner`) does that decision without a connection, so a table of facts and
arguments in, commands (or the no-op it says) out pins each decision down in milliseconds,
the way pyinfra tests its own operations (tests/operations/<op>/*.json there).

The host here is the least pyinfra needs: facts looked up by class name (and, for a fact
that takes arguments, by those arguments rendered as `name=value`), `noop` recorded, the
lines the operation says (`operations.log.say`) captured. pyinfra's own `files.put`, which
two operations delegate to, also reads `state.config.DIFF` and the host's temp filename:
a fake state answers those.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from io import StringIO
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from pyinfra import logger
from pyinfra.api import FileUploadCommand, FunctionCommand, StringCommand
from pyinfra.context import ctx_host, ctx_state

REPO = Path(__file__).resolve().parents[3]
TABLES = REPO / "tests" / "operations"


def fact_key(kwargs: dict[str, Any]) -> str:
    """A fact's arguments as the table spells them: `path=/etc/x`, `kind=lxc, vmid=201`;
    a sequence argument's items joined by commas (`paths=/a,/b`)."""

    def value(v: Any) -> str:
        if isinstance(v, list | tuple):
            return ",".join(str(item) for item in v)
        return str(v)

    return ", ".join(f"{k}={value(v)}" for k, v in sorted(kwargs.items()))


@dataclass
class FakeHost:
    """The host an operation's generator reads: facts from the case's table, nothing else.

    A fact the table lacks is an error naming what was asked: a case states every fact the
    operation reads, so a new read shows up as a failing table, not as a silent default."""

    facts: dict[str, Any]
    decoders: dict[str, Callable[[Any], Any]] = field(default_factory=dict)
    name: str = "pve1.lab.example"
    data: SimpleNamespace = field(default_factory=SimpleNamespace)
    print_prefix: str = ""
    current_op_global_arguments: dict[str, Any] | None = None
    noops: list[str] = field(default_factory=list)

    def get_fact(self, fact: type, **kwargs: Any) -> Any:
        name = fact.__name__
        if name not in self.facts:
            raise KeyError(f"the case has no fact {name} (asked with {fact_key(kwargs)!r})")
        answer = self.facts[name]
        if kwargs:
            key = fact_key(kwargs)
            if not isinstance(answer, dict) or key not in answer:
                raise KeyError(f"the case has no fact {name} for {key!r}")
            answer = answer[key]
        decode = self.decoders.get(name)
        return decode(answer) if decode is not None and answer is not None else answer

    def noop(self, description: str) -> None:
        self.noops.append(description)

    def get_temp_filename(self, *_: Any, **__: Any) -> str:
        return "/tmp/pyinfra-temp"  # files.put's upload target: not part of what is shown


def render(command: Any) -> str:
    """One yielded command as text: a shell line as it would run, an upload as its
    destination and content, an execution-time step as `function <name>(<what it shows>)`
    (the text pyinfra prints for it under --dry and -v)."""
    if isinstance(command, str):
        return command
    if isinstance(command, StringCommand):
        return command.get_raw_value()
    if isinstance(command, FileUploadCommand):
        src = command.src
        content = src.getvalue() if isinstance(src, StringIO) else f"<file {src}>"
        return f"upload {command.dest}\n{content}"
    if isinstance(command, FunctionCommand):
        name = getattr(command.function, "__name__", repr(command.function))
        return f"function {name}({', '.join(str(a) for a in command.args)})"
    raise TypeError(f"an operation yielded {command!r}, which the harness cannot render")


class Said(logging.Handler):
    """The lines an operation says through pyinfra's logger while it decides."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@contextmanager
def listening() -> Iterator[Said]:
    said = Said()
    level = logger.level
    logger.addHandler(said)
    logger.setLevel(logging.INFO)
    try:
        yield said
    finally:
        logger.removeHandler(said)
        logger.setLevel(level)


@dataclass
class Outcome:
    """What an operation did with a case: its commands, the no-ops and lines it said."""

    commands: list[str]
    noops: list[str]
    said: list[str]


def run_operation(
    op: Any,
    args: dict[str, Any],
    facts: dict[str, Any],
    decoders: dict[str, Callable[[Any], Any]] | None = None,
) -> Outcome:
    """`op._inner(**args)` against a host answering `facts`, its yield rendered as text."""
    host = FakeHost(facts, decoders or {})
    state = SimpleNamespace(config=SimpleNamespace(DIFF=False), cwd=None)
    with ctx_state.use(state), ctx_host.use(host), listening() as said:
        commands = [render(c) for c in op._inner(**args) or ()]
    return Outcome(commands, host.noops, said.lines)


def case_files() -> list[Path]:
    """Every table, tests/operations/<op>/<case>.json, in a stable order."""
    return sorted(TABLES.glob("*/*.json"))


def load_case(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())
