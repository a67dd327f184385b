"""Check a directory of model weights against a manifest, or make the manifest of one.

A site that already has a model's weights on the guest (a directory, or a host directory
bind-mounted into the container) names it in group_data `existing_weights`; the deploy runs this
before it links the directory into models_dir, so that a torn copy never serves.

    python3 weights_check.py DIR [--hashes] < manifest.json   # check; one JSON verdict
    python3 weights_check.py --make DIR [--hashes]            # a manifest of DIR on stdout

The manifest (llmhost/weights.py makes the same on the control machine):

    {"model": "kimi-k2.5-int4" | null, "repo": "org/name" | null,
     "revision": "<40 hex>" | null,
     "files": {"relative/path": {"size": 123, "sha256": "<64 hex>" | null}}}

Every listed file must be there with its size and readable by the user this runs as (the
deploy runs it as the service user vLLM runs as); with --hashes, also its sha256 where the
manifest has one (slow: it reads every byte). Files the manifest does not list are allowed
and reported. Exit 0: it matches; 1: it does not (the first problems go to stderr, each with
the file, what was expected and what was found); 2: the manifest is not one. Runs on the guest
with any python3 (stdlib only), imports nothing from llmhost; the control side imports it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import pwd
import re
import sys
from pathlib import PurePosixPath

SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")
REPO_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")
# `hf download --local-dir` keeps its own bookkeeping here; no weights, and it changes.
SKIPPED_DIRS = (".cache",)
SHOWN = 10  # problems named on stderr


def manifest_problems(data: object) -> list[str]:
    """What makes `data` (a parsed manifest) not one; [] when it is."""
    if not isinstance(data, dict):
        return ["not a JSON object"]
    problems = [
        f"unknown key {k!r}" for k in sorted(set(data) - {"model", "repo", "revision", "files"})
    ]
    for key in ("model", "repo", "revision"):
        if data.get(key) is not None and not isinstance(data[key], str):
            problems.append(f"{key}: a string or null, not {data[key]!r}")
    if isinstance(data.get("repo"), str) and not REPO_RE.match(data["repo"]):
        problems.append(f"repo: {data['repo']!r} is not org/name")
    if isinstance(data.get("revision"), str) and not COMMIT_RE.match(data["revision"]):
        problems.append(f"revision: {data['revision']!r} is not a 40-hex commit")
    files = data.get("files")
    if not isinstance(files, dict) or not files:
        return [*problems, "files: lists no file (an object of relative path -> entry)"]
    for name, entry in files.items():
        parts = PurePosixPath(name).parts
        plain = name == str(PurePosixPath(name)) and "." not in parts and ".." not in parts
        if not name or name.startswith("/") or not plain or "\\" in name:
            problems.append(f"files: {name!r} is not a relative path inside the directory")
            continue
        if not isinstance(entry, dict) or set(entry) - {"size", "sha256"}:
            problems.append(f"files.{name}: an object with 'size' and optional 'sha256'")
            continue
        size = entry.get("size")
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            problems.append(f"files.{name}.size: an integer >= 0, not {size!r}")
        sha = entry.get("sha256")
        if sha is not None and not (isinstance(sha, str) and SHA256_RE.match(sha)):
            problems.append(f"files.{name}.sha256: 64 lowercase hex or null, not {sha!r}")
    return problems


def sha256_of(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(8 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def file_sizes(directory: str) -> dict[str, int]:
    """{relative path: size} of the files under `directory`, through symlinks (a hub cache's
    snapshot is links to blobs), `.cache` at the top left out; what the deploy's FileSizes
    fact reads with find -L."""
    found = {}
    for root, dirs, names in os.walk(directory, followlinks=True):
        if root == directory:
            dirs[:] = [d for d in dirs if d not in SKIPPED_DIRS]
        for name in names:
            path = os.path.join(root, name)
            if os.path.isfile(path):
                found[os.path.relpath(path, directory)] = os.stat(path).st_size
    return dict(sorted(found.items()))


def size_problems(manifest: dict, found: dict[str, int]) -> list[dict]:
    """Each listed file that `found` ({relative path: size}) lacks or has at another size."""
    problems = []
    for rel, entry in sorted(manifest["files"].items()):
        size = found.get(rel)
        if size is None:
            problems.append(
                {"file": rel, "problem": "missing", "expected": entry["size"], "found": None}
            )
        elif size != entry["size"]:
            problems.append(
                {"file": rel, "problem": "size", "expected": entry["size"], "found": size}
            )
    return problems


def _user() -> str:
    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return f"uid {os.geteuid()}"


def _mode_of(path: str) -> str:
    st = os.stat(path)
    try:
        owner = pwd.getpwuid(st.st_uid).pw_name
    except KeyError:
        owner = str(st.st_uid)
    return f"mode {st.st_mode & 0o7777:04o}, owner {owner}"


def read_problems(directory: str, manifest: dict, found: dict[str, int]) -> list[dict]:
    """Each listed file this user cannot read: the file itself, or the directory on its way
    that it may not list (os.walk skips such a directory: its files look missing)."""
    problems = []
    user = _user()
    for rel in sorted(manifest["files"]):
        parts = rel.split("/")
        blocked = None
        for i in range(1, len(parts)):  # the directories on the way, top first
            sub = os.path.join(directory, *parts[:i])
            if os.path.isdir(sub) and not os.access(sub, os.R_OK | os.X_OK):
                blocked = "/".join(parts[:i])
                break
        path = os.path.join(directory, rel)
        if blocked is None and rel in found and not os.access(path, os.R_OK):
            blocked = rel
        if blocked is not None:
            where = os.path.join(directory, blocked)
            problems.append(
                {
                    "file": rel,
                    "problem": "unreadable",
                    "expected": user,
                    "found": f"{blocked}: {_mode_of(where)}",
                }
            )
    return problems


def make(
    directory: str,
    hashes: bool = False,
    model: str | None = None,
    repo: str | None = None,
    revision: str | None = None,
) -> dict:
    """The manifest of `directory`: every file with its size, and its sha256 with `hashes`."""
    if not os.path.isdir(directory):
        raise NotADirectoryError(f"{directory} is not a directory")
    files = {
        rel: {"size": size, "sha256": sha256_of(os.path.join(directory, rel)) if hashes else None}
        for rel, size in file_sizes(directory).items()
    }
    return {"model": model, "repo": repo, "revision": revision, "files": files}


def check(directory: str, manifest: dict, hashes: bool = False) -> dict:
    """The verdict: ok, the problems (file, problem, expected, found) and the extra files."""
    is_dir = os.path.isdir(directory)
    found = file_sizes(directory) if is_dir else {}
    unreadable = read_problems(directory, manifest, found) if is_dir else []
    blocked = {p["file"] for p in unreadable}
    problems = unreadable + [p for p in size_problems(manifest, found) if p["file"] not in blocked]
    hashed = 0
    bad = {p["file"] for p in problems}
    for rel, entry in sorted(manifest["files"].items()):
        if hashes and entry.get("sha256") and rel not in bad:
            hashed += 1
            sha = sha256_of(os.path.join(directory, rel))
            if sha != entry["sha256"]:
                problems.append(
                    {"file": rel, "problem": "sha256", "expected": entry["sha256"], "found": sha}
                )
    return {
        "ok": not problems,
        "dir": directory,
        "files": len(manifest["files"]),
        "bytes": sum(e["size"] for e in manifest["files"].values()),
        "hashed": hashed,
        "problems": problems,
        "extra": [f for f in found if f not in manifest["files"]],
    }


def describe(problem: dict) -> str:
    """One problem in words: `model.safetensors: size 4096 expected, 100 found`."""
    kind = problem["problem"]
    if kind == "unreadable":
        return f"{problem['file']}: not readable by {problem['expected']} ({problem['found']})"
    if kind == "missing":
        return f"{problem['file']}: missing ({problem['expected']} bytes expected)"
    what = "size" if kind == "size" else "sha256"
    return f"{problem['file']}: {what} {problem['expected']} expected, {problem['found']} found"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory")
    parser.add_argument("--make", action="store_true", help="print DIR's manifest instead")
    parser.add_argument("--hashes", action="store_true", help="sha256 of every file (slow)")
    args = parser.parse_args(argv)
    directory = os.path.abspath(args.directory)
    if args.make:
        print(json.dumps(make(directory, args.hashes), indent=1, sort_keys=True))
        return 0
    try:
        manifest = json.loads(sys.stdin.read())
    except ValueError as exc:
        print(f"weights check: the manifest on stdin is not JSON: {exc}", file=sys.stderr)
        return 2
    bad = manifest_problems(manifest)
    if bad:
        print("weights check: not a manifest: " + "; ".join(bad[:SHOWN]), file=sys.stderr)
        return 2
    if not os.path.isdir(directory):
        print(f"weights check: {directory} is not a directory", file=sys.stderr)
        print(json.dumps({"ok": False, "dir": directory, "problems": [], "extra": []}))
        return 1
    verdict = check(directory, manifest, args.hashes)
    print(json.dumps(verdict, sort_keys=True))
    if not verdict["ok"]:
        shown = [describe(p) for p in verdict["problems"][:SHOWN]]
        more = len(verdict["problems"]) - len(shown)
        print(
            f"weights check of {directory} failed ({len(verdict['problems'])} problem(s)): "
            + "; ".join(shown)
            + (f"; and {more} more" if more > 0 else ""),
            file=sys.stderr,
        )
        return 1
    extra = f"; {len(verdict['extra'])} file(s) not in the manifest" if verdict["extra"] else ""
    hashed = f", {verdict['hashed']} hashed" if args.hashes else ""
    print(
        f"weights check of {directory}: {verdict['files']} file(s), {verdict['bytes']} bytes "
        f"match{hashed}{extra}",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
