"""Types shared by every group_data model and the catalog: strict models, paths, ports, versions.

One home for them so the guest model, the Proxmox host model and the catalog import from
here and never from each other.
"""

from __future__ import annotations

import ipaddress
import re
from pathlib import PurePosixPath
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field


class Strict(BaseModel):
    """Unknown keys are errors (typos surface), and a validated config cannot be mutated."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def _abs_path(value: str) -> str:
    if not PurePosixPath(value).is_absolute() or any(c in value for c in " \t\n'\"$`"):
        raise ValueError("must be an absolute path without spaces, quotes or '$'")
    return value


AbsPath = Annotated[str, AfterValidator(_abs_path)]


def _ip(value: str) -> str:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        raise ValueError(f"{value!r} is not an IP address") from None
    return value


IpAddress = Annotated[str, AfterValidator(_ip)]
Port = Annotated[int, Field(ge=1024, le=65535)]
NAME_RE = r"^[a-z_][a-z0-9_-]{0,31}$"
VERSION_RE = r"^\d+(\.\d+){1,3}([a-z0-9.+-]*)$"


def version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", version))


class Reasoned(Strict):
    """A decision kept with its reason (group_data's `ruled_out` and `constraints` lists,
    which the state document prints)."""

    what: str = Field(min_length=1)
    why: str = Field(min_length=1)
