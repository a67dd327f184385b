"""A concurrency sweep with the lengths of a profile, labelled with what produced it."""

from __future__ import annotations

import datetime as dt
import subprocess
from collections.abc import Mapping
from pathlib import Path

import requests

from llmhost.bench.client import ProgressBar, run_level
from llmhost.bench.prompts import token_prompts
from llmhost.bench.result import LevelResult, RunConfig
from llmhost.catalog import BenchProfile


def git_sha() -> str:
    """The llmhost commit that ran the benchmark, "-dirty" when the tree has edits."""
    try:
        sha = subprocess.run(
            ["git", "-C", str(Path.cwd()), "rev-parse", "--short=12", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(Path.cwd()), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return sha + ("-dirty" if dirty else "")


def server_version(base_url: str) -> str:
    try:
        return str(requests.get(f"{base_url}/version", timeout=10).json()["version"])
    except (requests.RequestException, ValueError, KeyError):
        return "unknown"


def sweep(
    base_url: str,
    served_name: str,
    bench: BenchProfile,
    concurrencies: list[int],
    labels: dict[str, str] | None = None,
    show_progress: bool = True,
    *,
    headers: Mapping[str, str] | None = None,
) -> list[LevelResult]:
    """Every level in turn; `headers` (the API key) go on the requests, never into a result."""
    labels = labels or {}
    version = server_version(base_url)
    sha = git_sha()
    results = []
    for conc in concurrencies:
        count = bench.num_prompts(conc)
        prompts = token_prompts(
            base_url, served_name, count, bench.input_len, bench.seed, headers=headers
        )
        warmup = token_prompts(
            base_url,
            served_name,
            bench.warmup_requests,
            bench.input_len,
            bench.seed + 7919,
            headers=headers,
        )
        config = RunConfig(
            base_url=base_url,
            model=served_name,
            input_len=bench.input_len,
            output_len=bench.output_len,
            max_concurrency=conc,
            num_prompts=count,
            warmup_requests=len(warmup),
            seed=bench.seed,
            vllm_version=version,
            llmhost_git_sha=sha,
            date=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            **labels,
        )
        bar = ProgressBar(f"{labels.get('model_profile', served_name)} c={conc}")
        progress = bar if show_progress else None
        results.append(run_level(config, prompts, warmup, progress, headers=headers))
    return results
