"""A serving guest from nothing to proven: the table of contents serve.py and site.py share.

Checks that need the guest's live state (the host driver pin, a foreign server on the
serving port) run first, before any operation, so a refused run changes nothing.
"""

from __future__ import annotations

from pyinfra import host
from pyinfra.api.exceptions import PyinfraError

from llmhost.config.guest import GuestConfig
from llmhost.facts.files import FileText
from llmhost.facts.ports import PortHolders
from llmhost.naming import serving_record
from llmhost.operations.switch import switch_commit
from llmhost.secrets import ResolvedSecrets
from llmhost.tasks.gpu_userspace import gpu_userspace, preflight
from llmhost.tasks.guest_base import guest_base
from llmhost.tasks.hooks import hooks
from llmhost.tasks.model_stage import model_stage, prune_weights
from llmhost.tasks.switch import disk_preflight, switch_guard
from llmhost.tasks.uv_vllm import uv_vllm
from llmhost.tasks.vllm_service import retire_stale_units, retire_units, vllm_service

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


def serving_guest(cfg: GuestConfig, secrets: ResolvedSecrets, node_exporter: bool = False) -> None:
    """Stage while the old model serves; stop it; start the new one; prove it, or roll back.
    `node_exporter`: this run installs node exporter here before (deploys/site.py on a
    monitored site), so the gate records' textfile directory exists when they are written."""
    if cfg.accelerator == "cuda":
        preflight(cfg)  # a host driver other than the pin stops here
    ports_preflight(cfg)  # a foreign server on the port stops here
    disk_preflight(cfg)  # weights that cannot fit stop here, before any download
    record_text = host.get_fact(FileText, path=serving_record(cfg.root_dir))
    guard = switch_guard(cfg, secrets, record_text)  # says what it will switch, if anything
    guest_base(cfg)
    driver = gpu_userspace(cfg) if cfg.accelerator == "cuda" else []
    venv, shim = uv_vllm(cfg)
    weights = model_stage(cfg)
    retire_stale_units(guard.plan.retire_now)
    restarts = vllm_service(cfg, secrets, [*driver, venv, shim, *weights], guard)
    hooks(cfg, secrets, restarts, guard, node_exporter=node_exporter)
    switch_commit(name="switch: record the served model", guard=guard, record_text=record_text)
    retire_units(guard.plan.retire_after, f"keep_previous = {cfg.keep_previous}")
    if cfg.prune_weights:
        kept = [m for m, _ in cfg.units_and_ports()] + list(guard.plan.committed.previous)
        prune_weights(cfg, kept)
