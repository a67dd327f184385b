"""Benchmark history on the control machine: one JSON per run, one line per run, two plots.

<results_dir>/<host>/ (verify.results_dir: `results/` by default, which git ignores) holds
`<time>-<model>.json` (every level in `vllm bench serve` field names, the gate verdicts, the
configuration), `history.jsonl` (one summary line per run, appended) and PNGs: the latest
sweep against its baselines, and the history of output throughput per concurrency, so "as
fast as before" is a picture, not a memory.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from pathlib import Path
from typing import Any

from llmhost.bench.result import LevelResult


def host_dir(results_dir: Path, host: str) -> Path:
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", host)
    path = results_dir / safe
    path.mkdir(parents=True, exist_ok=True)
    return path


def save_run(
    results_dir: Path,
    host: str,
    model_profile: str,
    kind: str,
    results: list[LevelResult],
    baselines: dict[int, float],
    verdicts: dict[str, Any],
) -> Path:
    """Write the run's JSON, append its history line, redraw the host's plots."""
    directory = host_dir(results_dir, host)
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    path = directory / f"{stamp}-{model_profile}-{kind}.json"
    record = {
        "host": host,
        "model_profile": model_profile,
        "kind": kind,
        "baselines": {str(k): v for k, v in baselines.items()},
        "verdicts": verdicts,
        "results": [r.to_json() for r in results],
    }
    path.write_text(json.dumps(record, indent=2) + "\n")
    summary = {
        "date": results[0].config.date if results else stamp,
        "model_profile": model_profile,
        "kind": kind,
        "vllm_version": results[0].config.vllm_version if results else "",
        "llmhost_git_sha": results[0].config.llmhost_git_sha if results else "",
        "output_throughput": {str(r.max_concurrency): r.output_throughput for r in results},
        "file": path.name,
    }
    with (directory / "history.jsonl").open("a") as history:
        history.write(json.dumps(summary) + "\n")
    plot_host(directory, model_profile)
    return path


def read_history(directory: Path) -> list[dict[str, Any]]:
    path = directory / "history.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def plot_host(directory: Path, model_profile: str) -> list[Path]:
    """Two PNGs for the model on this host: latest sweep vs baseline, history per level."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = [h for h in read_history(directory) if h["model_profile"] == model_profile]
    if not runs:
        return []
    written = []
    latest = json.loads((directory / runs[-1]["file"]).read_text())
    levels = [r["max_concurrency"] for r in latest["results"]]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(levels, [r["output_throughput"] for r in latest["results"]], "o-", label="measured")
    base = sorted((int(k), v) for k, v in latest["baselines"].items())
    if base:
        ax.plot([b[0] for b in base], [b[1] for b in base], "s--", label="baseline")
    ax.set_xscale("log", base=2)
    path = directory / f"{model_profile}-throughput-vs-concurrency.png"
    written.append(
        _finish(
            fig, ax, path, "concurrency", f"{model_profile} on {directory.name} ({latest['kind']})"
        )
    )

    fig, ax = plt.subplots(figsize=(7, 4))
    for level in sorted({int(c) for run in runs for c in run["output_throughput"]}):
        points = [
            (i, run["output_throughput"][str(level)])
            for i, run in enumerate(runs)
            if str(level) in run["output_throughput"]
        ]
        ax.plot([p[0] for p in points], [p[1] for p in points], "o-", label=f"c={level}")
    path = directory / f"{model_profile}-history.png"
    written.append(
        _finish(
            fig, ax, path, "run (oldest first)", f"{model_profile} on {directory.name}: history"
        )
    )
    return written


def _finish(fig, ax, path: Path, xlabel: str, title: str) -> Path:  # noqa: ANN001
    import matplotlib.pyplot as plt

    ax.set_xlabel(xlabel)
    ax.set_ylabel("output tokens/s")
    ax.set_title(title)
    ax.legend()
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def save_benchmark(name: str, result: dict[str, Any], results_dir: Path) -> Path:
    """benchmarks/*.py: one JSON per run, `<name>-<UTC time>.json`."""
    results_dir.mkdir(parents=True, exist_ok=True)
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    path = results_dir / f"{name}-{stamp}.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    return path
