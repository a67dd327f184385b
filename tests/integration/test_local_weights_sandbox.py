"""Weights already on the box (group_data `existing_weights`) on the real sandbox guest.

The staged tiny-llama directory is copied to /srv/local-weights/tiny-llama, its manifest made
on the guest by the deploy's own checker (weights_check.py --make), and deploys/serve.py runs
with `--data existing_weights=...` pointing tiny-llama there. In order: the staged directory
in models_dir is refused (llmhost deletes no weights); once it is out of the way the site's
directory is checked and linked, and the model serves from it; a second run changes nothing;
a file cut short fails the guest naming the file and both sizes, the unit serving on. The
module's fixture puts the staged directory back (serve.py without the override removes the
link and builds tiny-llama again: byte-identical, fixed seeds) and deletes the copy.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from llmhost.config.guest import GuestConfig
from llmhost.guest import script
from llmhost.proofs.readiness import probe_once
from llmhost.testbed.sandbox import SandboxState, ssh_command
from tests.helpers import BASIC, SERVE, api_headers, changed_ops, guest_sh, pyinfra

SITE_DIR = "/srv/local-weights/tiny-llama"
UNIT = "llmhost-tiny-llama.service"
CUT = "llmhost-build.json"  # cut short: a file vLLM never reads after its start (no mmap)
UNIT_RUN = f"systemctl show -p ActiveEnterTimestamp,NRestarts,ActiveState {UNIT}"


def out_dir(cfg: GuestConfig) -> str:
    return f"{cfg.models_dir}/tiny-llama"


def serves(sandbox: SandboxState) -> bool:
    return probe_once(f"http://{sandbox.ip}:8000", "tiny-llama", headers=api_headers()).ready


def what_is_there(sandbox: SandboxState, path: str) -> str:
    return guest_sh(
        sandbox,
        f"if [ -L {path} ]; then echo link $(readlink {path}); "
        f"elif [ -d {path} ]; then echo dir; else echo absent; fi",
    )


def restore(sandbox: SandboxState, cfg: GuestConfig) -> None:
    """serve.py without the override: llmhost's link goes, tiny-llama is built again."""
    run = pyinfra(*SERVE, *BASIC)
    assert run.rc == 0, f"the restoring run failed:\n{run.tail()}"
    assert what_is_there(sandbox, out_dir(cfg)) == "dir"
    # Its marker went with the link (the manifest copy too; after a refusal alone it stays).
    marker = f"{cfg.models_dir}/.tiny-llama.llmhost-staged.json"
    assert guest_sh(sandbox, f"[ -e {marker} ] && echo there; true") == ""
    assert serves(sandbox)


@dataclass(frozen=True)
class OnTheBox:
    data: tuple[str, ...]  # the --data pointing tiny-llama at SITE_DIR (verify=basic)
    files: list[str]  # what the manifest lists


@pytest.fixture(scope="module")
def on_the_box(
    served: GuestConfig, sandbox: SandboxState, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OnTheBox]:
    """A copy of the staged tiny-llama at SITE_DIR and its manifest here; the `--data` that
    points tiny-llama at it. Afterwards the staged directory is back and the copy gone."""
    out = out_dir(served)
    if what_is_there(sandbox, out) != "dir":  # an earlier run of this module broke off
        restore(sandbox, served)
    guest_sh(sandbox, f"rm -rf {SITE_DIR} && mkdir -p /srv/local-weights && cp -a {out} {SITE_DIR}")
    made = subprocess.run(
        [*ssh_command(Path(sandbox.ssh_key)), f"python3 - --make {SITE_DIR}"],
        input=script("weights_check.py").read_text(),
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    manifest = {**json.loads(made.stdout), "model": "tiny-llama"}
    assert CUT in manifest["files"] and "model.safetensors" in manifest["files"], manifest
    path = tmp_path_factory.mktemp("existing-weights") / "tiny-llama.manifest.json"
    path.write_text(json.dumps(manifest, indent=1))
    data = {"tiny-llama": {"path": SITE_DIR, "manifest": str(path)}}
    try:
        yield OnTheBox(
            ("--data", f"existing_weights={json.dumps(data)}", *BASIC), sorted(manifest["files"])
        )
    finally:
        restore(sandbox, served)
        leftovers = (
            f"{served.models_dir}/.tiny-llama.llmhost-manifest.json "
            f"{served.root_dir}/bin/weights_check.py"
        )
        guest_sh(sandbox, f"rm -rf /srv/local-weights {leftovers}")


def test_a_staged_directory_in_the_way_is_refused_and_kept(
    on_the_box: OnTheBox, served: GuestConfig, sandbox: SandboxState
) -> None:
    before = guest_sh(sandbox, UNIT_RUN)
    run = pyinfra(*SERVE, *on_the_box.data)
    assert run.rc != 0, run.tail()
    said = f"existing_weights of tiny-llama: {out_dir(served)} is a dir, not a link llmhost made"
    assert said in run.output and "llmhost does not delete weights" in run.output, run.tail()
    assert what_is_there(sandbox, out_dir(served)) == "dir"
    assert guest_sh(sandbox, UNIT_RUN) == before and serves(sandbox)


def test_the_site_directory_is_checked_linked_and_served(
    on_the_box: OnTheBox, served: GuestConfig, sandbox: SandboxState
) -> None:
    # The site moves its copy in: the staged directory goes (the refusal's advice).
    guest_sh(sandbox, f"rm -rf {out_dir(served)}")
    run = pyinfra(*SERVE, *on_the_box.data)
    assert run.rc == 0, run.tail()
    assert any("weights tiny-llama" in op for op in changed_ops(run.output)), run.tail()
    assert what_is_there(sandbox, out_dir(served)) == f"link {SITE_DIR}"
    marker = json.loads(
        guest_sh(sandbox, f"cat {served.models_dir}/.tiny-llama.llmhost-staged.json")
    )
    assert marker["local"] == SITE_DIR and marker["hashes"] is False
    assert serves(sandbox)
    # llmhost wrote nothing into the site's directory.
    listed = guest_sh(sandbox, f"cd {SITE_DIR} && find . -type f -printf '%P\\n'")
    assert sorted(listed.splitlines()) == on_the_box.files


def test_a_second_run_changes_nothing(on_the_box: OnTheBox, sandbox: SandboxState) -> None:
    run = pyinfra(*SERVE, *on_the_box.data)
    assert run.rc == 0, run.tail()
    changed = changed_ops(run.output, errors_too=True)
    assert not changed, f"operations changed on a converged guest: {changed}"


def test_a_file_cut_short_fails_the_guest_naming_it_and_the_unit_serves_on(
    on_the_box: OnTheBox, served: GuestConfig, sandbox: SandboxState
) -> None:
    size = int(guest_sh(sandbox, f"stat -c %s {SITE_DIR}/{CUT}"))
    before = guest_sh(sandbox, UNIT_RUN)
    guest_sh(sandbox, f"truncate -s 3 {SITE_DIR}/{CUT}")
    run = pyinfra(*SERVE, *on_the_box.data)
    assert run.rc != 0, run.tail()
    said = f"existing_weights of tiny-llama: {SITE_DIR} does not match "
    assert said in run.output, run.tail()
    assert f"{CUT}: size {size} expected, 3 found" in run.output, run.tail()
    assert "no unit was touched" in run.output
    assert guest_sh(sandbox, UNIT_RUN) == before and serves(sandbox)
    assert what_is_there(sandbox, out_dir(served)) == f"link {SITE_DIR}"
