"""Stage model weights into models_dir: a hub download at a pinned revision, or a local build."""

from __future__ import annotations

import json
import shlex

from pyinfra import host
from pyinfra.api import operation

from llmhost.catalog import ModelProfile
from llmhost.facts.files import FileText

MARKER = "llmhost-staged.json"


def stage_marker(profile: ModelProfile) -> str:
    if profile.source == "local-build":
        return json.dumps({"build": profile.build, "recipe": 2}, sort_keys=True)
    return json.dumps({"repo": profile.hf_repo, "revision": profile.revision}, sort_keys=True)


def stage_commands(
    profile: ModelProfile, out: str, python: str, builder: str, hf_cli: str
) -> list[str]:
    q = shlex.quote
    if profile.source == "local-build":
        cmd = f"{q(python)} {q(builder)} --kind {q(str(profile.build))} --out {q(out)}"
    else:
        # hf prints per-file progress bars; resumable, so a failed run retries where it was.
        cmd = (
            f"HF_HUB_OFFLINE=0 HF_HUB_ENABLE_HF_TRANSFER=0 {q(hf_cli)} download "
            f"{q(str(profile.hf_repo))} --revision {q(str(profile.revision))} --local-dir {q(out)}"
        )
    return [
        cmd,
        # The service user reads the weights; some writers create files 0600.
        f"chmod -R a+rX {q(out)}",
        f"printf '%s\\n' {q(stage_marker(profile))} > {q(out + '/' + MARKER)}",
    ]


@operation()
def staged(profile: ModelProfile, models_dir: str, python: str, builder: str, hf_cli: str):
    """
    Make ``models_dir/<weights_id>`` hold the profile's weights, staged once.

    + profile: the catalog entry (hub repo + revision, or a local build recipe)
    + models_dir: where weights live on the guest
    + python: interpreter with torch/transformers, for local builds
    + builder: path of the uploaded tinymodels.py on the guest
    + hf_cli: path of the ``hf`` CLI (huggingface_hub) for hub downloads
    """
    out = f"{models_dir}/{profile.weights_id}"
    current = host.get_fact(FileText, path=f"{out}/{MARKER}")
    if current is not None and current.strip() == stage_marker(profile):
        host.noop(f"{profile.weights_id} already staged in {out}")
        return
    yield from stage_commands(profile, out, python, builder, hf_cli)
