"""The one-command fact for many managed paths, run by dash (Debian's /bin/sh) on real files:
absent paths, directories, files with their mode and digest, links followed."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

from llmhost.facts.files import PathStates


def states(*paths: Path) -> dict[str, dict[str, str]]:
    fact = PathStates()
    command = fact.command(paths=tuple(str(p) for p in paths))
    out = subprocess.run(["dash", "-c", command], capture_output=True, text=True, check=True)
    assert out.stderr == ""
    return fact.process(out.stdout.splitlines())


def test_absent_directories_files_and_links(tmp_path: Path) -> None:
    unit = tmp_path / "llmhost-m.service"
    unit.write_text("[Unit]\n")
    unit.chmod(0o600)
    link = tmp_path / "models"
    link.symlink_to(tmp_path)
    found = states(tmp_path / "absent", tmp_path, unit, link)
    assert str(tmp_path / "absent") not in found
    assert found[str(tmp_path)]["type"] == "d"
    user = found[str(unit)]["user"]
    assert found[str(unit)] == {
        "type": "f",
        "mode": "600",
        "user": user,
        "group": found[str(unit)]["group"],
        "sha256": hashlib.sha256(b"[Unit]\n").hexdigest(),
    }
    # A symlinked directory reads as what it points to (not as the link's 777).
    assert (
        found[str(link)]["type"] == "d" and found[str(link)]["mode"] == found[str(tmp_path)]["mode"]
    )
