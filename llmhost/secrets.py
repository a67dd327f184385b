"""Secrets from the control machine: read at deploy time, before any operation, and held as
pydantic SecretStr so that no repr, log line or pyinfra argument ever shows them.

group_data names where a secret is (an environment variable or a file), never the secret.
Its value goes only into the guest's 0600 env file (VLLM_API_KEY, HF_TOKEN) and into the
Authorization header of llmhost's own clients.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from pydantic import SecretStr

from llmhost.config.guest import GuestConfig, SecretSource
from llmhost.config.loading import ConfigError

# A value that could break out of its env-file line, or is too short to be a key.
SECRET_RE = re.compile(r"^[\x21-\x7e]{8,512}$")


@dataclass(frozen=True)
class ResolvedSecrets:
    api_key: SecretStr
    hf_token: SecretStr | None = None

    def auth_headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key.get_secret_value()}"}


def read_secret(source: SecretSource, environ: dict[str, str] | None = None) -> str:
    """The secret's value, or ValueError saying where it was looked for (not what was found)."""
    environ = os.environ if environ is None else environ  # type: ignore[assignment]
    if source.env is not None:
        value = environ.get(source.env)
        if value is None:
            raise ValueError(f"environment variable {source.env} is not set on the control machine")
    else:
        path = Path(str(source.file)).expanduser()
        try:
            value = path.read_text()
        except OSError as exc:
            raise ValueError(f"cannot read file {path}: {exc.strerror}") from None
    value = value.strip()
    if not SECRET_RE.match(value):
        raise ValueError(
            f"the value from {source.describe()} must be 8-512 printable characters without "
            "spaces or newlines"
        )
    return value


def resolve_secrets(cfg: GuestConfig, environ: dict[str, str] | None = None) -> ResolvedSecrets:
    """All of a guest's secrets, or one ConfigError naming the host and each bad field."""
    values: dict[str, SecretStr | None] = {"api_key": None, "hf_token": None}
    problems = []
    for field in ("api_key", "hf_token"):
        source = getattr(cfg.secrets, field)
        if source is None:
            continue
        try:
            values[field] = SecretStr(read_secret(source, environ))
        except ValueError as exc:
            problems.append(f"  secrets.{field}: {exc}")
    if problems:
        raise ConfigError(f"invalid group_data for host {cfg.host_name!r}:\n" + "\n".join(problems))
    assert values["api_key"] is not None
    return ResolvedSecrets(api_key=values["api_key"], hf_token=values["hf_token"])
