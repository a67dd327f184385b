"""One systemd unit per served model; units the data no longer names are stopped and removed."""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from pyinfra import host
from pyinfra.api import deploy
from pyinfra.api.operation import OperationMeta
from pyinfra.operations import files, systemd
from pyinfra.operations.util import any_changed

from llmhost.catalog import servable_models
from llmhost.config.guest import GuestConfig
from llmhost.facts.files import NeedsDaemonReload, NewerThanUnit, UnitFileState, needs_disable
from llmhost.naming import ab_unit_name, dropin_dir, env_file, unit_file, unit_name
from llmhost.operations.files import atomic_file
from llmhost.operations.models import marker_path
from llmhost.operations.switch import SwitchGuard, switch_start, switch_stop
from llmhost.operations.venv import SPEC_FILE
from llmhost.render import render_env, render_unit, unit_paths
from llmhost.secrets import ResolvedSecrets
from llmhost.switch.plan import conflicts_with
from llmhost.tasks.model_stage import existing_weights_ids, models_to_stage

DROPIN_NAME = "llmhost-one-model.conf"


def has_ab_unit(cfg: GuestConfig, model: str) -> bool:
    return cfg.profile_for(model).speculative is not None and cfg.verify.draft_ab != "never"


def retire_units(units: Iterable[str], why: str) -> None:
    """Stop, disable and remove units with their env files and drop-ins (weights stay), then
    one daemon-reload. `systemctl disable` runs only for a unit with links to remove: it
    reloads systemd itself, and a static or disabled unit (the A/B twin, a previous model)
    has nothing to disable. A reload is not free: once, a guest's systemd took its whole
    180 s timeout."""
    removed = []
    for unit in sorted(units):
        linked = needs_disable(host.get_fact(UnitFileState, unit=unit))
        systemd.service(
            name=f"stop {unit} ({why})",
            service=unit,
            running=False,
            enabled=False if linked else None,
        )
        removed.append(files.file(name=f"remove {unit}", path=unit_file(unit), present=False))
        removed.append(
            files.directory(
                name=f"remove drop-ins of {unit}",
                path=dropin_dir(unit),
                present=False,
            )
        )
        files.file(
            name=f"remove env of {unit}",
            path=env_file(unit),
            present=False,
        )
    if removed:
        systemd.daemon_reload(
            name="systemd daemon-reload (units removed)", _if=any_changed(*removed)
        )


@deploy("retire units the data dropped")
def retire_stale_units(stale: frozenset[str]) -> None:
    """Units neither the data nor the switch record (the previous model) still want."""
    retire_units(stale, "the data no longer names it")


def unit_inputs(cfg: GuestConfig, model: str) -> tuple[str, ...]:
    """Files whose change means the running server is outdated (see NewerThanUnit)."""
    paths = unit_paths(cfg, model)
    linked = existing_weights_ids(cfg)  # their marker is beside the link, not inside
    weights = [
        marker_path(cfg.models_dir, p.weights_id, p.weights_id in linked)
        for p in models_to_stage(cfg)
    ]
    return (
        paths.env_file,
        paths.unit_file,
        paths.entry_shim,
        f"{cfg.venv_dir}/{SPEC_FILE}",
        *weights,
    )


def dropin_path(cfg: GuestConfig) -> str:
    return f"{dropin_dir(unit_name(cfg.served_model))}/{DROPIN_NAME}"


def unit_files(cfg: GuestConfig, model: str, port: int, secrets: ResolvedSecrets) -> list:
    """Env file (0600: the API key) and unit(s), each written atomically."""
    paths = unit_paths(cfg, model)
    ops = [
        atomic_file(
            name=f"env file {paths.env_file} (0600)",
            content=render_env(cfg, model, secrets),
            dest=paths.env_file,
            mode="600",
        ),
        atomic_file(
            name=f"unit {paths.unit_name}",
            content=render_unit(cfg, model, port),
            dest=paths.unit_file,
        ),
    ]
    if has_ab_unit(cfg, model):
        ops.append(
            atomic_file(
                name=f"unit {ab_unit_name(model)} (draft A/B reference, not enabled)",
                content=render_unit(cfg, model, port, without_draft=True),
                dest=unit_file(ab_unit_name(model)),
            )
        )
    return ops


class UnitOps(NamedTuple):
    """The operations that may (re)start a model's unit in this run; proofs ask them."""

    restart: OperationMeta
    start: OperationMeta

    def started(self) -> bool:
        return self.restart.did_change() or self.start.did_change()


def one_model_dropin(cfg: GuestConfig) -> OperationMeta:
    """Conflicts= with every other model's units: one model holds the GPUs at a time.

    A drop-in, not the unit: it is not an input of the server (NewerThanUnit), so a new
    catalog entry reloads systemd and never restarts a 30-minute load.
    """
    co_served = {u.model for u in cfg.extra_units}
    catalog = cfg.catalog()
    servable = [
        m for m in servable_models(cfg.catalogs) if catalog[m].accelerator == cfg.accelerator
    ]
    conflicts = conflicts_with(cfg.served_model, co_served, servable)
    content = (
        "# Managed by llmhost: starting this unit stops any other model's (and vice versa).\n"
        "[Unit]\n" + "".join(f"Conflicts={u}\n" for u in conflicts)
    )
    return atomic_file(
        name=f"{unit_name(cfg.served_model)}: Conflicts= with the other models' units",
        content=content,
        dest=dropin_path(cfg),
    )


@deploy("vLLM systemd units")
def vllm_service(
    cfg: GuestConfig,
    secrets: ResolvedSecrets,
    upstream_changes: list[OperationMeta],
    guard: SwitchGuard,
) -> dict[str, UnitOps]:
    """Returns each model's restart/start operations: the hooks ask whether it (re)started.

    Every file is written (and systemd reloaded) before the switch stops the old model, so
    the downtime holds nothing but the stop, the GPU check and the new model's load.
    """
    written = {}
    for model, port in cfg.units_and_ports():
        env, *units = unit_files(cfg, model, port, secrets)
        written[model] = (env, units)
    dropin = one_model_dropin(cfg)
    reload_ops = [dropin, *(u for _, units in written.values() for u in units)]
    # A fact read now: a run interrupted after a rewrite left a reload pending.
    pending = any(host.get_fact(NeedsDaemonReload, unit=unit_name(m)) for m in written)
    files_changed = any_changed(*reload_ops)
    systemd.daemon_reload(name="systemd daemon-reload", _if=lambda: files_changed() or pending)
    switch_stop(name="switch: stop the previous model, GPUs free", guard=guard)
    restarts = {}
    for model, (env, units) in written.items():
        unit = unit_name(model)
        changed = any_changed(env, *units, *upstream_changes)
        outdated = host.get_fact(NewerThanUnit, unit=unit, paths=unit_inputs(cfg, model))
        # Restart first: a unit that was not running yet is then started once, not twice.
        restart = systemd.service(
            name=f"restart {unit} (unit, env, venv or weights changed)",
            service=unit,
            restarted=True,
            _if=lambda c=changed, o=outdated: c() or bool(o),
        )
        if model == cfg.served_model and guard.plan.switching:
            # Under the guard: a start that fails rolls back to the previous model.
            start = switch_start(name=f"switch: start {unit}", guard=guard, unit=unit)
        else:
            start = systemd.service(
                name=f"{unit} enabled and running", service=unit, running=True, enabled=True
            )
        restarts[model] = UnitOps(restart, start)
    return restarts
