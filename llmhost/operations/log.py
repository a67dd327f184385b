"""How execution-time code reaches the host whose operation runs: print a line under its
prefix (`say`), run a command on it (`guest_run`). The plain-Python engines (proofs/,
switch/) are handed these as their `Log` and `Shell`."""

from __future__ import annotations

from pyinfra import host, logger
from pyinfra.api import StringCommand


def say(message: str) -> None:
    logger.info(f"{host.print_prefix}{message}")


def guest_run(command: str) -> tuple[bool, str, str]:
    """Run `command` on the host now (no output printed): (ok, stdout, stderr)."""
    ok, output = host.run_shell_command(StringCommand(command), print_output=False)
    return ok, output.stdout, output.stderr
