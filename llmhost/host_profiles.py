"""Host profiles (host_profiles.toml): the serving environment of each kind of guest and, for
the Proxmox side, its kernel parameters and modules. Data with a model, like the catalog: a
typo fails at load time with the profile and field named.
"""

from __future__ import annotations

import tomllib
from functools import cache
from pathlib import Path

from pydantic import ValidationError

from llmhost.config.types import Strict

HOST_PROFILES_FILE = Path(__file__).with_name("host_profiles.toml")


class HostSide(Strict):
    """What deploys/host.py does for this profile on the Proxmox host.

    kernel_params are added (name=value replaces the same name), kernel_params_absent removed
    by name; `{gpu_pci_ids}` is filled with the host's comma-joined vendor:device ids.
    """

    kernel_params: tuple[str, ...]
    kernel_params_absent: tuple[str, ...] = ()
    modules: tuple[str, ...]
    modprobe: tuple[str, ...] = ()


class HostProfile(Strict):
    name: str
    description: str
    env: dict[str, str] = {}
    host: HostSide | None = None  # None: not a Proxmox host profile (the sandbox)


class HostProfileError(ValueError):
    pass


def parse_host_profiles(text: str) -> dict[str, HostProfile]:
    profiles: dict[str, HostProfile] = {}
    for name, data in tomllib.loads(text).get("profiles", {}).items():
        try:
            profiles[name] = HostProfile(name=name, **data)
        except ValidationError as exc:
            first = exc.errors()[0]
            loc = ".".join(str(p) for p in first["loc"])
            raise HostProfileError(f"host profile {name!r}: {loc}: {first['msg']}") from exc
    return profiles


@cache
def load_host_profiles() -> dict[str, HostProfile]:
    return parse_host_profiles(HOST_PROFILES_FILE.read_text())


def host_profile(name: str) -> HostProfile:
    return load_host_profiles()[name]
