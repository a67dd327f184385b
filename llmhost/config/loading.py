"""Validate a host's group_data before the first operation touches it.

pyinfra hands deploys a flat, untyped `host.data`. A typo there would otherwise surface as
a Jinja `Undefined`, a bad unit file or a half-converged host. `load_guest(host)` and
`load_proxmox_host(host)` turn it into frozen pydantic models and raise one ConfigError
naming the host, each bad field path and what is allowed.
"""

from __future__ import annotations

import difflib
from typing import Any, TypeVar, overload

from pydantic import TypeAdapter, ValidationError
from pyinfra.api.exceptions import PyinfraError

from llmhost.config.guest import GUEST_KINDS, GuestConfig
from llmhost.config.monitoring import ExporterConfig, MonitoringConfig
from llmhost.config.proxmox_host import ProxmoxHostConfig
from llmhost.config.router import RouterConfig
from llmhost.config.types import Strict

ModelT = TypeVar("ModelT", bound=Strict)

# Fields pyinfra itself reads from host.data (connectors, sudo, ...): never ours to judge.
PYINFRA_DATA_PREFIXES = ("ssh_", "_", "docker_", "chroot_", "local_", "winrm_", "podman_")


class ConfigError(PyinfraError):
    """Bad group_data; raised before any operation, so the host is left untouched."""


GUEST = TypeAdapter(GuestConfig)


def fields_of(model: Any) -> set[str]:
    """The fields a model validates; for GuestConfig, those of either kind of guest."""
    if model is GuestConfig:
        return {f for kind in GUEST_KINDS.values() for f in kind.model_fields}
    return set(model.model_fields)


def _all_fields() -> list[str]:
    return [
        *sorted(fields_of(GuestConfig)),
        *ProxmoxHostConfig.model_fields,
        *MonitoringConfig.model_fields,
        *RouterConfig.model_fields,
    ]


def other_kind(loc: tuple[Any, ...], tag: str) -> str | None:
    """The accelerator whose guests have the field at `loc` (e.g. ("vllm", "cuda_variant"))
    when a guest of `tag` does not."""
    for accelerator, kind in GUEST_KINDS.items():
        if accelerator != tag and has_field(kind, loc):
            return accelerator
    return None


def has_field(model: Any, loc: tuple[Any, ...]) -> bool:
    for part in loc:
        fields = getattr(model, "model_fields", None)
        if not isinstance(fields, dict) or str(part) not in fields:
            return False
        model = fields[str(part)].annotation
    return True


def host_profiles() -> str:
    """Every host profile, with the accelerator its guests serve with."""
    return ", ".join(
        f"{profile!r} (accelerator {accelerator!r})"
        for accelerator, kind in GUEST_KINDS.items()
        for profile in kind.model_fields["host_profile"].annotation.__args__
    )


def guest_error(err: dict[str, Any]) -> dict[str, Any] | None:
    """A GuestConfig error as if from one model: the kind's tag out of its path, the tag's
    own errors and the fields of the other kind in words a site's author reads; None: not a
    guest's (already plain)."""
    kind, loc = err["loc"][:1], err["loc"][1:]
    if err["type"] == "union_tag_not_found":
        return {**err, "loc": ("accelerator",), "type": "missing"}
    if err["type"] == "union_tag_invalid":
        given = err.get("ctx", {}).get("tag")
        msg = f"got {given!r}; Input should be 'cuda' or 'cpu'"
        return {**err, "loc": ("accelerator",), "type": "value_error", "msg": msg}
    if not kind or kind[0] not in GUEST_KINDS:
        return None
    err = {**err, "loc": loc}
    if err["type"] == "extra_forbidden":
        other = other_kind(loc, str(kind[0]))
        if other:
            msg = f"only for accelerator {other!r}; this guest's is {kind[0]!r}"
            return {**err, "type": "value_error", "msg": msg}
    if loc == ("gpu_count",) and kind[0] == "cpu" and err["type"] == "literal_error":
        msg = f"got {err.get('input')!r}; a cpu guest has no GPUs (0, or leave it out)"
        return {**err, "type": "value_error", "msg": msg}
    if loc == ("host_profile",) and err["type"] == "literal_error":
        msg = f"got {err.get('input')!r}; one of {host_profiles()}"
        return {**err, "type": "value_error", "msg": msg}
    return err


def format_errors(host_name: str, exc: ValidationError, guest: bool = False) -> str:
    """One line per bad field: its path, what was given, what is allowed."""
    lines = []
    for err in exc.errors():
        if guest:
            err = guest_error(dict(err)) or err
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


@overload
def validate(model: type[ModelT], host_name: str, data: dict[str, Any]) -> ModelT: ...


@overload
def validate(model: object, host_name: str, data: dict[str, Any]) -> GuestConfig: ...


def validate(model: Any, host_name: str, data: dict[str, Any]) -> Any:
    """`model` (a Strict model, or GuestConfig: a CpuGuest or a CudaGuest by its accelerator)
    from a host's data; ConfigError naming the host and each bad field."""
    payload = _ours(data, fields_of(model))
    payload["host_name"] = host_name
    guest = model is GuestConfig
    try:
        return GUEST.validate_python(payload) if guest else model.model_validate(payload)
    except ValidationError as exc:
        raise ConfigError(format_errors(host_name, exc, guest)) from None


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
