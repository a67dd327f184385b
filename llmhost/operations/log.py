"""One way for execution-time operations to print a line under the host's prefix."""

from __future__ import annotations

from pyinfra import host, logger


def say(message: str) -> None:
    logger.info(f"{host.print_prefix}{message}")
