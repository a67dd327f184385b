"""What this run does about the served model, decided before any operation.

Reads the guest's serving record and units, plans the switch (llmhost/switch/plan.py), and
builds the guard the proofs roll back through. The disk check is here too: weights that
cannot fit refuse the guest before the first download, while the old model keeps serving.
"""

from __future__ import annotations

from pyinfra import host, logger

from llmhost import interrupt
from llmhost.config.guest import GuestConfig
from llmhost.endpoint import Endpoint
from llmhost.facts.files import FileText, FreeBytes, LlmhostUnitStates
from llmhost.monitoring import gate_textfile
from llmhost.naming import serving_record, unit_name
from llmhost.operations.log import guest_run, say
from llmhost.operations.models import marker_path, stage_marker
from llmhost.operations.switch import RollbackTarget, SwitchGuard
from llmhost.proofs.correct import CorrectnessRecord
from llmhost.render import gpu_free_command
from llmhost.secrets import ResolvedSecrets
from llmhost.switch.plan import ServingRecord, failed_before, plan_switch
from llmhost.tasks.hooks import correctness_check, probe_address, state_record
from llmhost.tasks.model_stage import models_to_stage

GB = 1_000_000_000


def disk_refusal(cfg: GuestConfig) -> str | None:
    """Free space on the models disk against the disk_gb of every weights set to stage; why
    the guest is refused when they cannot fit (before any download, the old model serving)."""
    # Weights already on the box (existing_weights, disk_gb 0 here) take no room: they are
    # neither counted nor named; the others are missing unless their marker says staged.
    missing = [
        p
        for p in models_to_stage(cfg)
        if p.disk_gb
        and (
            host.get_fact(FileText, path=marker_path(cfg.models_dir, p.weights_id, False)) or ""
        ).strip()
        != stage_marker(p)
    ]
    need = sum(p.disk_gb for p in missing) * GB
    if not missing or need == 0:
        return None
    free = host.get_fact(FreeBytes, path=cfg.models_dir)
    if free is None or free >= need:
        return None
    names = ", ".join(f"{p.weights_id} ({p.disk_gb} GB)" for p in missing)
    return (
        f"models_dir {cfg.models_dir} has {free / GB:.2f} GB free, staging needs "
        f"{need / GB:.0f} GB for {names}: free space or move models_dir; nothing was changed "
        "and the model that serves keeps serving"
    )


def failed_before_refusal(cfg: GuestConfig, record_text: str | None) -> str | None:
    """The served model failed its proofs on this guest before (its serving record says so)
    and the site did not ask to try again: why the guest is refused."""
    record = ServingRecord.parse(record_text)
    failed = failed_before(record, cfg.served_model)
    if not failed or cfg.retry_failed_switch:
        return None
    serving = record.current or "the previous model"
    return (
        f"{failed.splitlines()[0][:300]}\n{serving} serves. Fix the cause and rerun with "
        "--data retry_failed_switch=true, or set served_model back; nothing was changed"
    )


def rollback_target(cfg: GuestConfig, model: str, secrets: ResolvedSecrets) -> RollbackTarget:
    profile = cfg.catalog()[model]
    address = f"http://{probe_address(cfg)}:{cfg.port}"
    endpoint = Endpoint(address, str(profile.served_name), secrets.api_key)
    check = record = None
    if cfg.verify.correctness and profile.correctness:
        check = correctness_check(cfg, model, endpoint)
        record = CorrectnessRecord(unit_name(model), state_record(cfg, model, "correct"), check)
    return RollbackTarget(
        model=model,
        endpoint=endpoint,
        load_timeout_s=profile.load_timeout_s,
        check=check,
        record=record,
    )


def switch_guard(
    cfg: GuestConfig, secrets: ResolvedSecrets, record_text: str | None
) -> SwitchGuard:
    """The plan from the guest's record and units; printed now, so --dry shows it too.
    (A served model that failed before is refused first: failed_before_refusal.)"""
    record = ServingRecord.parse(record_text)
    units = host.get_fact(LlmhostUnitStates)  # one guest command: files and states
    active = [u for u, state in units.items() if state in ("active", "activating")]
    co_served = {u.model for u in cfg.extra_units}
    plan = plan_switch(
        record, cfg.served_model, sorted(units), active, co_served, cfg.keep_previous
    )
    source = plan.source
    guard = SwitchGuard(
        plan=plan,
        host_name=host.name,
        record_path=serving_record(cfg.root_dir),
        target_unit=unit_name(cfg.served_model),
        source=rollback_target(cfg, source, secrets) if source else None,
        gpu_free=" ".join(gpu_free_command(cfg)),
        results_dir=cfg.verify.results_dir,
        shell=guest_run,
        log=say,
        source_leftovers=(gate_textfile(source),) if source and source not in co_served else (),
        target_leftovers=(gate_textfile(cfg.served_model),)
        if source and cfg.served_model not in co_served
        else (),
    )
    interrupt.describe_state_with(guard.on_interrupt)
    for note in plan.notes:
        logger.info(f"{host.print_prefix}{note}")
    if source:
        logger.info(
            f"{host.print_prefix}switch {source} -> {cfg.served_model}: stage, stop {source}, "
            f"start {cfg.served_model}, prove it; any failure rolls back to {source}"
        )
    return guard
