"""One systemd unit per served model; units the data no longer names are stopped and removed."""

from __future__ import annotations

from typing import NamedTuple

from pyinfra import host
from pyinfra.api import deploy
from pyinfra.api.operation import OperationMeta
from pyinfra.operations import files, systemd
from pyinfra.operations.util import any_changed

from llmhost.config.guest import GuestConfig
from llmhost.facts.files import LlmhostUnits, NeedsDaemonReload, NewerThanUnit
from llmhost.operations.files import atomic_file
from llmhost.operations.models import MARKER
from llmhost.operations.venv import SPEC_FILE
from llmhost.render import ab_unit_name, render_env, render_unit, unit_name, unit_paths
from llmhost.secrets import ResolvedSecrets
from llmhost.tasks.model_stage import models_to_stage


def wanted_units(cfg: GuestConfig) -> set[str]:
    """Serving units, plus the A/B reference unit of each model that has a draft."""
    units = set()
    for model, _ in cfg.units_and_ports():
        units.add(unit_name(model))
        if has_ab_unit(cfg, model):
            units.add(ab_unit_name(model))
    return units


def has_ab_unit(cfg: GuestConfig, model: str) -> bool:
    return cfg.profile_for(model).speculative is not None and cfg.verify.draft_ab != "never"


@deploy("retire units the data dropped")
def retire_stale_units(cfg: GuestConfig) -> None:
    wanted = wanted_units(cfg)
    stale = [u for u in host.get_fact(LlmhostUnits) if u not in wanted]
    removed = []
    for unit in stale:
        systemd.service(name=f"stop {unit}", service=unit, running=False, enabled=False)
        removed.append(
            files.file(name=f"remove {unit}", path=f"/etc/systemd/system/{unit}", present=False)
        )
        files.file(
            name=f"remove env of {unit}",
            path=f"/etc/llmhost/{unit.removesuffix('.service')}.env",
            present=False,
        )
    if removed:
        systemd.daemon_reload(
            name="systemd daemon-reload (units removed)", _if=any_changed(*removed)
        )


def unit_inputs(cfg: GuestConfig, model: str) -> tuple[str, ...]:
    """Files whose change means the running server is outdated (see NewerThanUnit)."""
    paths = unit_paths(cfg, model)
    weights = [f"{cfg.models_dir}/{p.weights_id}/{MARKER}" for p in models_to_stage(cfg)]
    return (
        paths.env_file,
        paths.unit_file,
        paths.entry_shim,
        f"{cfg.venv_dir}/{SPEC_FILE}",
        *weights,
    )


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
                dest=f"/etc/systemd/system/{ab_unit_name(model)}",
            )
        )
    return ops


class UnitOps(NamedTuple):
    """The operations that may (re)start a model's unit in this run; proofs ask them."""

    restart: OperationMeta
    start: OperationMeta

    def started(self) -> bool:
        return self.restart.did_change() or self.start.did_change()


@deploy("vLLM systemd units")
def vllm_service(
    cfg: GuestConfig, secrets: ResolvedSecrets, upstream_changes: list[OperationMeta]
) -> dict[str, UnitOps]:
    """Returns each model's restart/start operations: the hooks ask whether it (re)started."""
    restarts = {}
    for model, port in cfg.units_and_ports():
        unit = unit_name(model)
        env, *units = unit_files(cfg, model, port, secrets)
        changed = any_changed(env, *units, *upstream_changes)
        units_changed = any_changed(*units)
        # Facts read now: a run interrupted after a rewrite left these behind.
        reload_pending = host.get_fact(NeedsDaemonReload, unit=unit)
        outdated = host.get_fact(NewerThanUnit, unit=unit, paths=unit_inputs(cfg, model))
        systemd.daemon_reload(
            name="systemd daemon-reload",
            _if=lambda c=units_changed, r=reload_pending: c() or r,
        )
        # Restart first: a unit that was not running yet is then started once, not twice.
        restart = systemd.service(
            name=f"restart {unit} (unit, env, venv or weights changed)",
            service=unit,
            restarted=True,
            _if=lambda c=changed, o=outdated: c() or bool(o),
        )
        start = systemd.service(
            name=f"{unit} enabled and running",
            service=unit,
            running=True,
            enabled=True,
        )
        restarts[model] = UnitOps(restart, start)
    return restarts
