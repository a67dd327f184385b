"""Validate a host's group_data before the first operation touches it.

pyinfra hands deploys a flat, untyped `host.data`. A typo there would otherwise surface as
a Jinja `Undefined`, a bad unit file or a half-converged host. `load_guest(host)` and
`load_proxmox_host(host)` turn it into frozen pydantic models and raise one ConfigError
naming the host, each bad field path and what is allowed.
"""

from __future__ import annotations

import difflib
from typing import Any, TypeVar

from pydantic import ValidationError
from pyinfra.api.exceptions import PyinfraError

from llmhost.config.guest import GuestConfig
from llmhost.config.monitoring import ExporterConfig, MonitoringConfig
from llmhost.config.proxmox_host import ProxmoxHostConfig
from llmhost.config.router import RouterConfig
from llmhost.config.types import Strict

ModelT = TypeVar("ModelT", bound=Strict)

# Fields pyinfra itself reads from host.data (connectors, sudo, ...): never ours to judge.
PYINFRA_DATA_PREFIXES = ("ssh_", "_", "docker_", "chroot_", "local_", "winrm_", "podman_")


class ConfigError(PyinfraError):
    """Bad group_data; raised before any operation, so the host is left untouched."""


def _all_fields() -> list[str]:
    return [
        *GuestConfig.model_fields,
        *ProxmoxHostConfig.model_fields,
        *MonitoringConfig.model_fields,
        *RouterConfig.model_fields,
    ]


def format_errors(host_name: str, exc: ValidationError) -> str:
    """One line per bad field: its path, what was given, what is allowed."""
    lines = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"])
        msg = err["msg"].removeprefix("Value error, ")
        if err["loc"][:1] == ("secrets",):
            # Someone may have put the secret itself here: never echo what was given.
            err = {**err, "input": None}
            msg = (
                "required field is missing"
                if err["type"] == "missing"
                else f"{msg} (name an environment variable or a file: "
                '{"env": "NAME"} or {"file": "/path"}; never the secret itself)'
            )
            lines.append(f"  {loc}: {msg}")
            continue
        if err["type"] == "missing":
            msg = "required field is missing"
        elif err["type"] == "extra_forbidden":
            field = str(err["loc"][-1])
            close = difflib.get_close_matches(field, _all_fields(), n=1)
            msg = "unknown field" + (f" (did you mean {close[0]!r}?)" if close else "")
        elif err["type"] == "literal_error":
            msg = f"got {err.get('input')!r}; {msg}"
        elif "input" in err and err["type"] not in ("value_error", "assertion_error"):
            msg = f"got {err['input']!r}; {msg}"
        lines.append(f"  {loc}: {msg}" if loc else f"  {msg}")
    return f"invalid group_data for host {host_name!r}:\n" + "\n".join(lines)


def _ours(data: dict[str, Any], fields: set[str]) -> dict[str, Any]:
    """The keys this model validates; unknown non-pyinfra keys too, so typos are caught."""
    known_elsewhere = set(_all_fields()) - fields
    return {
        k: v
        for k, v in data.items()
        if not k.startswith(PYINFRA_DATA_PREFIXES) and k not in known_elsewhere
    }


def validate(model: type[ModelT], host_name: str, data: dict[str, Any]) -> ModelT:
    payload = _ours(data, set(model.model_fields))
    payload["host_name"] = host_name
    try:
        return model.model_validate(payload)
    except ValidationError as exc:
        raise ConfigError(format_errors(host_name, exc)) from None


def host_data(host: Any) -> dict[str, Any]:
    return dict(host.data.dict())


def load_guest(host: Any) -> GuestConfig:
    return validate(GuestConfig, host.name, host_data(host))


def load_proxmox_host(host: Any) -> ProxmoxHostConfig:
    return validate(ProxmoxHostConfig, host.name, host_data(host))


def load_exporter(host: Any) -> ExporterConfig:
    return validate(ExporterConfig, host.name, host_data(host))


def load_monitoring(host: Any) -> MonitoringConfig:
    return validate(MonitoringConfig, host.name, host_data(host))


def load_router(host: Any) -> RouterConfig:
    return validate(RouterConfig, host.name, host_data(host))
