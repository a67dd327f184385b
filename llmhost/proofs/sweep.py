"""The load sweep: every concurrency level of a profile, measured where the gate reads it.

`vllm bench serve` runs on the guest next to the server (bench/guest_bench.py builds its
command), or, with verify.load_generator = "control", llmhost's own client runs from the
control machine; both give LevelResults labelled with how they were measured.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import SecretStr

from llmhost.bench.baselines import BaselineKey, bench_settings
from llmhost.bench.guest_bench import (
    DEADLINE_STATUS,
    END_TO_END,
    MEASURED_BY,
    GuestBench,
    level_from_vllm,
    parse_runs,
    parse_state,
    parse_warmup,
    parse_warmup_runs,
    poll_command,
    start_command,
    stop_command,
)
from llmhost.bench.history import save_run
from llmhost.bench.result import LevelResult, RunConfig, median_run
from llmhost.bench.sweep import git_sha, server_version
from llmhost.catalog import BenchProfile
from llmhost.endpoint import Endpoint
from llmhost.interrupt import Interrupted
from llmhost.proofs import deadlines
from llmhost.proofs.base import Log, ProofFailed, Shell, no_shell
from llmhost.proofs.correct import CorrectnessCheck
from llmhost.proofs.readiness import API_KEY_ENV
from llmhost.wait import until


@dataclass(frozen=True)
class BenchRun:
    """What identifies a benchmark run: the server, the model, its benchmark, where results go."""

    endpoint: Endpoint  # the server, the name it answers to, the site's key (sent, saved nowhere)
    model: str  # the catalog profile
    bench: BenchProfile  # lengths, concurrencies (baseline keys), tolerance
    labels: dict[str, str]  # host (required), host profile, model profile for the results
    results_dir: str  # on the control machine; relative: to the directory pyinfra runs in
    venv: str = ""  # what the host baseline is keyed on, with the driver and the settings
    driver: str = ""  # the NVIDIA driver pin; "" on a CPU guest
    placement: str = ""  # a CPU guest's CPUs (baselines.cpu_placement); "" on a GPU guest
    rebaseline: bool = False  # verify.rebaseline: this run replaces the host's baseline
    guest: GuestBench | None = None  # `vllm bench serve` on the guest; None: control machine
    # The correctness probe asked again under traffic before the sweep (the load proofs'
    # cadence); None when the profile has no probe, verify.correctness is off or rounds = 0.
    traffic_check: CorrectnessCheck | None = field(default=None, repr=False, compare=False)
    shell: Shell = field(default=no_shell, repr=False, compare=False)  # the guest's sweep, the A/B
    log: Log = field(default=print, repr=False, compare=False)

    @property
    def host(self) -> str:
        return self.labels["host"]

    def baseline_key(self) -> BaselineKey:
        settings = bench_settings(self.bench.input_len, self.bench.output_len, self.levels)
        settings += "-guest" if self.guest is not None else "-control"  # load generator
        return BaselineKey(self.host, self.model, self.venv, self.driver, settings, self.placement)

    @property
    def levels(self) -> list[int]:
        return sorted(self.bench.baselines)

    def save(self, kind: str, results: list[LevelResult], verdicts: dict[str, object]) -> Path:
        target = Path(self.results_dir).absolute()
        return save_run(
            target, self.host, self.model, kind, results, self.bench.baselines, verdicts
        )


def sweep_env(api_key: SecretStr | None) -> dict[str, str]:
    """The benchmark child's environment: the API key goes there, never into its argv."""
    env = {k: v for k, v in os.environ.items() if k != API_KEY_ENV}
    if api_key is not None:
        env[API_KEY_ENV] = api_key.get_secret_value()
    return env


def run_sweep(run: BenchRun) -> list[LevelResult]:
    """Every level of the profile: `vllm bench serve` on the guest, or (verify.load_generator
    = "control") llmhost's client from the control machine, labelled end to end."""
    results = guest_sweep(run) if run.guest is not None else control_sweep(run)
    failed = [r for r in results if r.failed]
    if failed:
        errors = "; ".join(e for r in failed for e in r.errors)
        raise ProofFailed(f"benchmark requests failed at {run.endpoint.base_url}: {errors}")
    return results


def guest_sweep(run: BenchRun) -> list[LevelResult]:
    """`vllm bench serve` from the served venv on the guest, every level in one process:
    a warm-up at the top level until two runs agree, then `bench.runs` interleaved rounds;
    each level's result is its median run (with every run's tok/s and their spread)."""
    assert run.guest is not None
    say = run.log
    version, sha = server_version(run.endpoint.base_url), git_sha()
    say(
        f"benchmark {run.model}: vllm bench serve on the guest at 127.0.0.1, c={run.levels}, "
        f"warm-up then {run.bench.runs} run(s) a level"
    )
    prefix = f"/tmp/llmhost-bench-{run.model}"
    stdout = poll_sweep(run, prefix)
    warmup = parse_warmup(stdout)
    if warmup is not None:
        readings = ", ".join(f"{x:.0f}" for x in warmup["readings"])
        state_word = "warm" if warmup["warm"] else "NOT settled (capped)"
        say(
            f"benchmark {run.model} warm-up at c={warmup['max_concurrency']}: "
            f"{warmup['runs']} run(s) in {warmup['seconds']:.0f} s, {state_word}: {readings} tok/s"
        )
    found = parse_runs(stdout)
    results = []
    for conc in run.levels:
        if conc not in found:
            raise ProofFailed(f"vllm bench serve on the guest gave no result for c={conc}")
        config = RunConfig(
            base_url=f"http://127.0.0.1:{run.guest.port}",
            model=run.endpoint.served_name,
            input_len=run.bench.input_len,
            output_len=run.bench.output_len,
            max_concurrency=conc,
            num_prompts=run.bench.num_prompts(conc),
            warmup_requests=run.bench.warmup_requests,
            seed=run.bench.seed,
            vllm_version=version,
            llmhost_git_sha=sha,
            date=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            measured_by=MEASURED_BY,
            **run.labels,
        )
        result = median_run([level_from_vllm(data, config) for data in found[conc]])
        result.warmup = warmup if conc == max(run.levels) else None
        runs = ", ".join(f"{x:.0f}" for x in result.runs_output_throughput)
        say(
            f"benchmark {run.model} c={conc}: {result.output_throughput:.1f} output tok/s "
            f"(median of {runs}; CV {result.spread:.1%}), "
            f"TTFT p50 {result.median_ttft_ms:.0f} ms, TPOT p50 {result.median_tpot_ms:.1f} ms"
        )
        results.append(result)
    return results


# How often the control side looks at a detached sweep on the guest (a command of ~6 ms).
POLL_EVERY_S = 3.0


def poll_sweep(run: BenchRun, prefix: str) -> str:
    """Start the sweep detached on the guest, look at it every POLL_EVERY_S, print what it
    waits on every 15 s, and return its result lines once it is done. ProofFailed, with the
    numbers, when it fails or passes its deadline (proofs/deadlines.py: the guest's `timeout`
    ends it there, the control side stops it shortly after if that did not)."""
    assert run.guest is not None
    bench, levels = run.bench, run.levels
    deadline = deadlines.sweep_deadline_s(bench, levels)
    at_floor = deadlines.sweep_at_floor_s(bench, levels)
    command = start_command(
        run.guest, bench, run.endpoint.served_name, levels, prefix, math.ceil(deadline)
    )
    start, said = time.monotonic(), 0.0
    budget = (
        f"its {deadline:.0f} s deadline ({at_floor:.0f} s of measured runs at the catalog "
        f"floor, x{deadlines.LIMITS.sweep_factor:g}, plus the warm-up and vLLM's start)"
    )
    latest = ("gone", None, "", "")

    def finished() -> bool:
        nonlocal said, latest
        ok, out, err = run.shell(poll_command(prefix))
        state, rc = parse_state(out) if ok else ("unknown", None)
        latest = (state, rc, out, err)
        elapsed = time.monotonic() - start
        if state in ("done", "gone"):
            return True
        if state == "starting" and elapsed > NEVER_STARTED_S:  # its sh never ran
            raise ProofFailed(
                f"vllm bench serve did not start on the guest within {NEVER_STARTED_S:.0f} s "
                f"(no pid file):\n{err.strip()[-2000:]}"
            )
        if elapsed - said >= deadlines.LIMITS.progress_every_s:
            said = elapsed
            run.log(
                f"benchmark {run.model} on the guest: {elapsed:.0f} s of {budget}; "
                + sweep_progress(out, bench, levels)
            )
        return False

    try:
        ok, _, stderr = run.shell(command)
        if not ok:
            raise ProofFailed(f"vllm bench serve could not start on the guest:\n{stderr.strip()}")
        run.log(f"benchmark {run.model}: started on the guest, {budget}")
        until(finished, deadline + STOP_GRACE_S, every_s=POLL_EVERY_S)
    except ProofFailed:
        run.shell(stop_command(prefix))
        raise
    except Interrupted:  # Ctrl-C: the benchmark must not go on loading the server
        run.shell(stop_command(prefix))
        run.log(f"benchmark {run.model}: stopped on the guest")
        raise
    state, rc, stdout, stderr = latest
    elapsed = time.monotonic() - start
    if state not in ("done", "gone") or rc == DEADLINE_STATUS:
        run.shell(stop_command(prefix))
        raise ProofFailed(
            f"benchmark {run.model} on the guest stopped at its deadline: ran {elapsed:.0f} s "
            f"of {budget}; {sweep_progress(stdout, bench, levels)}: the server is starved "
            "or stuck"
        )
    if state == "gone":
        raise ProofFailed(
            f"vllm bench serve on the guest ended after {elapsed:.0f} s without an exit "
            f"status (killed); {sweep_progress(stdout, bench, levels)}"
        )
    if rc != 0:
        raise ProofFailed(
            f"vllm bench serve on the guest failed (exit {rc}):\n{stderr.strip()[-3000:]}"
        )
    return stdout


# After the sweep's deadline, how long the control side waits for the guest's `timeout`.
STOP_GRACE_S = 30.0
# A sweep still without its pid file this long after its start never started (its sh).
NEVER_STARTED_S = 60.0


def sweep_progress(stdout: str, bench: BenchProfile, levels: list[int]) -> str:
    """How far a sweep got, from its result lines so far: warm-up runs and measured runs,
    the latest figures (tok/s)."""
    warm = parse_warmup_runs(stdout)
    try:
        found = parse_runs(stdout)
    except (ValueError, KeyError, TypeError):  # a line the benchmark is still writing
        found = parse_runs("\n".join(stdout.splitlines()[:-1]))
    total = bench.runs * len(levels)
    done = sum(len(v) for v in found.values())
    parts = []
    if warm:
        parts.append(f"warm-up runs: {', '.join(f'{x:.1f}' for x in warm)} tok/s")
    elif bench.warmup_max_runs:
        parts.append("no warm-up run finished yet")
    measured = ", ".join(
        f"c={c}: " + "/".join(f"{r.get('output_throughput', 0):.1f}" for r in runs)
        for c, runs in sorted(found.items())
    )
    parts.append(
        f"{done} of {total} measured runs done" + (f" ({measured} tok/s)" if measured else "")
    )
    return "; ".join(parts)


def control_sweep(run: BenchRun) -> list[LevelResult]:
    """llmhost's client in its own process: pyinfra's gevent patching and asyncio don't mix.

    The API key reaches the child as $LLMHOST_API_KEY: argv shows in `ps` and in pyinfra's
    output on failure, the environment does neither.
    """
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "bench.json"
        argv = [
            sys.executable,
            "-m",
            "llmhost.bench",
            "--url",
            run.endpoint.base_url,
            "--model",
            run.endpoint.served_name,
            "--bench-json",
            run.bench.model_dump_json(),
            "--json",
            str(out),
        ]
        argv += [f"--label={k}={v}" for k, v in run.labels.items()]
        # The sweep's deadline (proofs/deadlines.py); the child prints its own progress.
        deadline = deadlines.sweep_deadline_s(run.bench, run.levels)
        try:
            proc = subprocess.run(
                argv,
                stdout=subprocess.PIPE,
                text=True,
                env=sweep_env(run.endpoint.api_key),
                timeout=deadline,
            )
        except subprocess.TimeoutExpired:
            at_floor = deadlines.sweep_at_floor_s(run.bench, run.levels)
            raise ProofFailed(
                f"benchmark {run.model} from the control machine stopped at its deadline of "
                f"{deadline:.0f} s ({at_floor:.0f} s of measured runs at the catalog floor, "
                f"x{deadlines.LIMITS.sweep_factor:g}): the server is starved or stuck"
            ) from None
        if not out.exists():
            raise ProofFailed(
                f"benchmark against {run.endpoint.base_url} failed (exit {proc.returncode})"
            )
        results = [LevelResult.from_json(r) for r in json.loads(out.read_text())]
    for result in results:
        result.config.measured_by = END_TO_END
    return results
