"""A long guest command with a progress line every few seconds: how much it has written.

Staging Kimi's weights moves 547 GB and takes most of an hour; a venv sync takes minutes.
pyinfra prints a command's output only when it fails, so a long step would look hung. Here
the command runs as usual while a second greenlet measures, over the same connection, what
it has written so far (`du` of its output directories) and prints it with the rate.

An operation yields it as one command (`progress_step`: a FunctionCommand, operations/step.py),
so the long part runs in its place in the run, counts as the change it is, and shows under
--dry; nothing runs in the operation's generator.
"""

from __future__ import annotations

import shlex
import time

import gevent
from pyinfra import host
from pyinfra.api import FunctionCommand, OperationError, StringCommand
from pyinfra.context import ctx_host

from llmhost.interrupt import interruptible
from llmhost.operations.log import say
from llmhost.operations.step import engine_step

GB = 1_000_000_000


def written_bytes(paths: list[str]) -> int | None:
    """Bytes under `paths` on the guest (absent ones count 0)."""
    quoted = " ".join(shlex.quote(p) for p in paths)
    ok, out = host.run_shell_command(
        StringCommand(f"du -scb {quoted} 2>/dev/null | tail -n 1 | cut -f1")
    )
    text = "".join(out.stdout_lines).strip()
    return int(text) if ok and text.isdigit() else None


def progress_line(label: str, done: int, total: int | None, elapsed: float) -> str:
    rate = done / elapsed if elapsed > 0 else 0.0
    of = f" of ~{total / GB:.1f} GB ({min(done / total, 1):.0%})" if total else ""
    return f"{label}: {done / GB:.2f} GB{of} written after {elapsed:.0f}s ({rate / 1e6:.0f} MB/s)"


def progress_step(
    label: str,
    command: str,
    watch: list[str],
    total_bytes: int | None = None,
    every_s: float = 10.0,
) -> FunctionCommand:
    """`run_with_progress` as one command of an operation; a failure fails its host."""

    def step() -> None:
        run_with_progress(label, command, watch, total_bytes, every_s)

    step.__name__ = label.replace(" ", "_")  # what --dry and -v print, with the command
    return engine_step(step, shown=(command,))


def run_with_progress(
    label: str,
    command: str,
    watch: list[str],
    total_bytes: int | None = None,
    every_s: float = 10.0,
) -> None:
    """Run `command` on the guest; print a progress line every `every_s`; raise on failure."""
    start = time.monotonic()
    say(f"{label}: started" + (f" (~{total_bytes / GB:.1f} GB)" if total_bytes else ""))

    this_host = ctx_host.get()  # pyinfra's host is greenlet-local: hand it to the reporter

    def report() -> None:
        with ctx_host.use(this_host):
            while True:
                gevent.sleep(every_s)
                done = written_bytes(watch)
                if done is not None:
                    say(progress_line(label, done, total_bytes, time.monotonic() - start))

    reporter = gevent.spawn(report)
    try:
        with interruptible(label):
            ok, out = host.run_shell_command(StringCommand(command))
    finally:
        reporter.kill()
    if not ok:
        tail = "\n".join((out.stderr_lines or out.stdout_lines)[-15:])
        raise OperationError(f"{label} failed after {time.monotonic() - start:.0f}s:\n{tail}")
    say(f"{label}: done in {time.monotonic() - start:.0f}s")
