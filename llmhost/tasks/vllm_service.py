"""One systemd unit per served model; units the data no longer names are stopped and removed."""

from __future__ import annotations

from io import StringIO

from pyinfra import host
from pyinfra.api import deploy
from pyinfra.api.operation import OperationMeta
from pyinfra.operations import files, systemd
from pyinfra.operations.util import any_changed

from llmhost.config.guest import GuestConfig
from llmhost.facts.files import LlmhostUnits
from llmhost.render import ab_unit_name, render_env, render_unit, unit_name, unit_paths


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


@deploy("vLLM systemd units")
def vllm_service(
    cfg: GuestConfig, upstream_changes: list[OperationMeta]
) -> dict[str, OperationMeta]:
    """Returns each model's restart operation: the hooks ask it whether the unit changed."""
    restarts = {}
    for model, port in cfg.units_and_ports():
        paths = unit_paths(cfg, model)
        env = files.put(
            name=f"env file {paths.env_file} (0600)",
            src=StringIO(render_env(cfg, model)),
            dest=paths.env_file,
            mode="600",
            user="root",
            group="root",
        )
        unit = files.put(
            name=f"unit {paths.unit_name}",
            src=StringIO(render_unit(cfg, model, port)),
            dest=paths.unit_file,
            mode="644",
        )
        changed_units = [unit]
        if has_ab_unit(cfg, model):
            changed_units.append(
                files.put(
                    name=f"unit {ab_unit_name(model)} (draft A/B reference, not enabled)",
                    src=StringIO(render_unit(cfg, model, port, without_draft=True)),
                    dest=f"/etc/systemd/system/{ab_unit_name(model)}",
                    mode="644",
                )
            )
        systemd.daemon_reload(name="systemd daemon-reload", _if=any_changed(*changed_units))
        # Restart first: a unit that was not running yet is then started once, not twice.
        restarts[model] = systemd.service(
            name=f"restart {paths.unit_name} (unit, env, venv or weights changed)",
            service=paths.unit_name,
            restarted=True,
            _if=any_changed(env, unit, *upstream_changes),
        )
        systemd.service(
            name=f"{paths.unit_name} enabled and running",
            service=paths.unit_name,
            running=True,
            enabled=True,
        )
    return restarts
