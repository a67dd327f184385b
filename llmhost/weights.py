"""Manifests of weights already on the box (group_data `existing_weights`).

A manifest lists what a weights directory holds, so that the deploy can check a directory it
did not stage before it serves from it (llmhost/guest/weights_check.py, on the guest):

    {"model": "kimi-k2.5-int4" | null,      # the catalog model it is for
     "repo": "moonshotai/Kimi-K2.5" | null,  # the hub repository it came from
     "revision": "<40 hex>" | null,          # the hub commit; must be the model's pinned one
     "files": {"relative/path": {"size": 123, "sha256": "<64 hex>" | null}}}

Make one from a directory (here, or on the guest with weights_check.py --make):

    python -m llmhost.weights manifest DIR [--model NAME] [--repo ORG/NAME] [--revision SHA]
        [--hashes] > file.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys

from llmhost.guest.weights_check import make, manifest_problems

__all__ = ["load_manifest", "main", "make", "manifest_problems", "manifest_sha256"]


def load_manifest(text: str) -> dict:
    """A manifest from its JSON text; ValueError naming what is wrong."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"not JSON: {exc}") from None
    problems = manifest_problems(data)
    if problems:
        shown = "; ".join(problems[:5]) + (
            f"; and {len(problems) - 5} more" if len(problems) > 5 else ""
        )
        raise ValueError(shown)
    return data


def manifest_sha256(text: str) -> str:
    """What the staging marker records of a manifest: the sha256 of its text."""
    return hashlib.sha256(text.encode()).hexdigest()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m llmhost.weights", description=__doc__.splitlines()[0]
    )
    sub = parser.add_subparsers(dest="command", required=True)
    cmd = sub.add_parser("manifest", help="print the manifest of a weights directory")
    cmd.add_argument("directory")
    cmd.add_argument("--model", help="the catalog model the weights are for")
    cmd.add_argument("--repo", help="the hub repository they came from (org/name)")
    cmd.add_argument("--revision", help="the hub commit they are (40 hex)")
    cmd.add_argument("--hashes", action="store_true", help="sha256 of every file (slow)")
    args = parser.parse_args(argv)
    try:
        manifest = make(args.directory, args.hashes, args.model, args.repo, args.revision)
    except OSError as exc:
        print(f"llmhost.weights: {exc}", file=sys.stderr)
        return 1
    problems = manifest_problems(manifest)
    if problems:
        print(f"llmhost.weights: {'; '.join(problems)}", file=sys.stderr)
        return 1
    print(json.dumps(manifest, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
