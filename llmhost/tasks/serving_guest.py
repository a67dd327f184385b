"""A serving guest from nothing to proven: the table of contents serve.py and site.py share.

Checks that need the guest's live state (the host driver pin, a foreign server on the
serving port, the models disk, a switch that failed before) run first: a guest they refuse
gets one failing operation instead of its others, so nothing on it changes, and the site's
other hosts converge.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyinfra import host

from llmhost.config.guest import GuestConfig
from llmhost.facts.files import FileText
from llmhost.facts.ports import PortHolders
from llmhost.naming import serving_record
from llmhost.operations.refused import refuse_host
from llmhost.operations.switch import switch_commit
from llmhost.secrets import ResolvedSecrets
from llmhost.tasks.gpu_userspace import driver_refusal, gpu_userspace
from llmhost.tasks.guest_base import guest_base
from llmhost.tasks.hooks import hooks
from llmhost.tasks.model_stage import model_stage, prune_weights
from llmhost.tasks.switch import disk_refusal, failed_before_refusal, switch_guard
from llmhost.tasks.uv_vllm import uv_vllm
from llmhost.tasks.vllm_service import retire_stale_units, retire_units, vllm_service

LLMHOST_UNIT_PREFIX = "llmhost-"


def ports_refusal(cfg: GuestConfig) -> str | None:
    """Each serving port is free or held by one of llmhost's own units; why not."""
    for model, port in cfg.units_and_ports():
        foreign = [
            h
            for h in host.get_fact(PortHolders, port=port)
            if not h.unit.startswith(LLMHOST_UNIT_PREFIX)
        ]
        if foreign:
            return (
                f"port {port} (for {model}) is already held by "
                + "; ".join(h.describe() for h in foreign)
                + ": stop that server or set another `port` in group_data; nothing was changed"
            )
    return None


def live_state_refusal(cfg: GuestConfig, record_text: str | None) -> str | None:
    """The first reason the guest's live state gives not to touch it, in the order a user
    fixes them: a host driver other than the pin, a foreign server on a serving port, weights
    that cannot fit, a served model that failed its proofs here before."""
    checks = (
        lambda: driver_refusal(cfg) if cfg.accelerator == "cuda" else None,
        lambda: ports_refusal(cfg),
        lambda: disk_refusal(cfg),
        lambda: failed_before_refusal(cfg, record_text),
    )
    return next((why for check in checks if (why := check())), None)


@dataclass(frozen=True)
class LiveState:
    """What the guest's live state said: its serving record (read once: pyinfra 3.10 keeps no
    fact cache, so each read is an ssh round trip) and why it is refused, if it is."""

    record_text: str | None
    refused: str | None


def checked_guest(cfg: GuestConfig) -> LiveState:
    """The guest's live state; when it refuses the guest, its one failing operation is added
    now (llmhost/operations/refused.py): call it before any other operation on it."""
    record_text = host.get_fact(FileText, path=serving_record(cfg.root_dir))
    refused = live_state_refusal(cfg, record_text)
    if refused:
        refuse_host("the guest's live state", refused)
    return LiveState(record_text, refused)


def serving_guest(
    cfg: GuestConfig,
    secrets: ResolvedSecrets,
    node_exporter: bool = False,
    live: LiveState | None = None,
) -> None:
    """Stage while the old model serves; stop it; start the new one; prove it, or roll back.
    `node_exporter`: this run installs node exporter here before (deploys/site.py on a
    monitored site), so the gate records' textfile directory exists when they are written.
    A guest whose live state refuses it gets one failing operation instead, and the site's
    other hosts go on; `live`: what checked_guest said when the caller asked first."""
    live = live or checked_guest(cfg)
    if live.refused:
        return
    record_text = live.record_text
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
