"""A serving guest from nothing to proven: the table of contents serve.py and site.py share.

Checks that need the guest's live state (the host driver pin, a foreign server on the
serving port) run first, before any operation, so a refused run changes nothing.
"""

from __future__ import annotations

from pyinfra import host
from pyinfra.api.exceptions import PyinfraError

from llmhost.config.guest import GuestConfig
from llmhost.facts.ports import PortHolders
from llmhost.secrets import ResolvedSecrets
from llmhost.tasks.gpu_userspace import gpu_userspace, preflight
from llmhost.tasks.guest_base import guest_base
from llmhost.tasks.hooks import hooks
from llmhost.tasks.model_stage import model_stage
from llmhost.tasks.uv_vllm import uv_vllm
from llmhost.tasks.vllm_service import retire_stale_units, vllm_service

LLMHOST_UNIT_PREFIX = "llmhost-"


class PortTakenError(PyinfraError):
    """Another server listens on a port llmhost is to serve on; raised before any operation."""


def ports_preflight(cfg: GuestConfig) -> None:
    """Each serving port is free or held by one of llmhost's own units."""
    for model, port in cfg.units_and_ports():
        foreign = [
            h
            for h in host.get_fact(PortHolders, port=port)
            if not h.unit.startswith(LLMHOST_UNIT_PREFIX)
        ]
        if foreign:
            raise PortTakenError(
                f"{host.name}: port {port} (for {model}) is already held by "
                + "; ".join(h.describe() for h in foreign)
                + ": stop that server or set another `port` in group_data; nothing was changed"
            )


def serving_guest(cfg: GuestConfig, secrets: ResolvedSecrets) -> None:
    if cfg.accelerator == "cuda":
        preflight(cfg)  # a host driver other than the pin stops here
    ports_preflight(cfg)  # a foreign server on the port stops here
    guest_base(cfg)
    if cfg.accelerator == "cuda":
        gpu_userspace(cfg)
    venv, shim = uv_vllm(cfg)
    weights = model_stage(cfg)
    retire_stale_units(cfg)
    restarts = vllm_service(cfg, secrets, upstream_changes=[venv, shim, *weights])
    hooks(cfg, secrets, restarts)
