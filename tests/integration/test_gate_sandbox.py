"""The throughput gate on the sandbox, on the box's own scatter: a baseline that is not set
cold, quiet gates that do not fail, and regressions of 4x and of 20% that do.

The module restarts the serving unit (a cold server, as after a fresh sandbox), then runs
`deploys/serve.py --data verify=full` ten times against a results directory of its own,
so the first run starts a new host baseline:
- each sweep warms the server first and measures each level three times (median);
- the first five passing runs make the baseline (their median: the sandbox's profile sets
  `baseline_runs = 5`), and that first baseline is within 10% of what runs 6 to 10 measure
  (or within twice the box's measured scatter, inside a sweep or between sweeps, where that
  is wider; a level whose scatter allows more than 20% is not judged, and says so);
- all ten pass: the five that make the baseline on the catalog's floor, then runs 6 to 10,
  five gates in a row on the complete baseline; one that fails only where its own line says
  the floor sits inside the box's noise (UNRESOLVED) is skipped with its numbers;
then the same unit, throttled on the guest (SIGSTOP/SIGCONT on a fixed clock) to a quarter of
its time and then to four fifths of its baseline (a 20% regression, the throttle sized on the
box's speed of the minute), fails the gate both times on the host baseline, the second after
its confirming sweeps; the catalog's figure alone passes it.
"""

from __future__ import annotations

import ast
import json
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from llmhost.bench.result import robust_cv
from llmhost.catalog import BenchProfile
from llmhost.config.guest import GuestConfig
from llmhost.testbed.sandbox import SandboxState
from tests.helpers import REPO, SERVE, Run, guest_sh, pyinfra

UNIT = "llmhost-tiny-llama.service"
PIDFILE = "/run/llmhost-drill-throttle.pid"
# Ten quiet gates in a row (issue 21): five make the baseline, five more must pass on it and
# measure what it says (the first baseline against the five further runs). Each gate is
# ~25 s on a normal day, ~50 s on a slow one.
QUIET = 10
FIRST_N = 5  # the sandbox profile's baseline_runs
RESOLVED_Z = 2  # a difference of two scattered figures is resolved past 2 standard deviations
UNRESOLVED_PAST = 0.20  # an allowance wider than the regression the gate must catch judges nothing
REGRESSION = 0.20  # the drill's regression: the server at four fifths of its baseline
REGRESSION_AT_MOST = 0.40  # the largest share of the time the throttle stops the server
THROTTLE_PERIOD_S = 0.25  # the throttle's clock: stopped, then running, every 0.25 s
DRILL_ATTEMPTS = 3
GUEST_ONLY = ("--limit", "sandbox")  # the stand-in has nothing to do with a gate


@pytest.fixture(scope="module")
def results_dir() -> str:
    return f"results/gate-drill-{int(time.time())}"


# The quiet gates confirm a low reading after this pause, not the catalog's 120 s: a shorter
# pause can only fail more of them (a slow spell of the host spans more of the confirming
# sweeps), so a pass is no weaker evidence; and a run that reads low costs about 2 minutes,
# not 5 (CI-like run, kept sandbox: two such runs took 10 of the module's 14 minutes).
QUIET_CONFIRM_AFTER_S = 30


@pytest.fixture(scope="module")
def verify_data(results_dir: str) -> str:
    """The gate on demand, on this module's baseline. Correctness has its own tests: off
    here, it would add its probes (under traffic too) to every one of the runs."""
    verify = {"mode": "full", "results_dir": results_dir, "draft_ab": "never"}
    verify |= {"correctness": False, "bench": {"confirm_after_s": QUIET_CONFIRM_AFTER_S}}
    return f"verify={json.dumps(verify)}"


@pytest.fixture(scope="module")
def drill_data(results_dir: str) -> str:
    """The same, with a short pause before the confirming sweep: a throttle does not pass in
    a minute as a burst of load does, and waiting for it would only cost the suite time."""
    verify = {"mode": "full", "results_dir": results_dir, "draft_ab": "never"}
    verify |= {"correctness": False, "bench": {"confirm_after_s": 5}}
    return f"verify={json.dumps(verify)}"


@pytest.fixture(scope="module")
def gates(sandbox: SandboxState, served: GuestConfig, verify_data: str) -> list[Run]:
    # Cold, as after a fresh sandbox: restarted unless it started moments ago (a first deploy,
    # or the module before this one serving the default model again).
    started = f'$(date -d "$(systemctl show -p ActiveEnterTimestamp --value {UNIT})" +%s)'
    age = int(guest_sh(sandbox, f"echo $(( $(date +%s) - {started} ))") or 10**6)
    if age > 120:
        guest_sh(sandbox, f"systemctl restart {UNIT}")
    runs = []
    for _ in range(QUIET):
        runs.append(pyinfra(*SERVE, *GUEST_ONLY, "--data", verify_data))
        if runs[-1].rc != 0 and len(runs) <= FIRST_N:
            break  # no complete baseline: the tests say which run failed and why
    # A quiet gate that fails (runs 6 to 10) joins nothing: the next ones are still judged on
    # the same complete baseline, and the quiet-gates test says which failed and why.
    return runs


def baseline_set(output: str) -> dict[int, float] | None:
    """The host baseline a run recorded (its first run, or a passing run joining it), None
    when it left it as it was."""
    found = re.findall(r"host baseline of .* set \((.+?)\): (\{.*\})", output)
    return ast.literal_eval(found[-1][1]) if found else None


def test_the_first_run_warms_the_server_and_starts_the_baseline(gates: list[Run]) -> None:
    first = gates[0]
    assert first.rc == 0, first.tail()
    assert "warm-up at c=8:" in first.output, first.tail()
    assert "set (first passing run)" in first.output, first.tail()
    saved = re.search(r"benchmark results: (\S+\.json)", first.output)
    assert saved, first.tail()
    record = json.loads((REPO / saved.group(1)).read_text())
    top = record["results"][-1]
    assert top["warmup"]["runs"] >= 2 and len(top["warmup"]["readings"]) == top["warmup"]["runs"]
    assert len(top["runs_output_throughput"]) == 3  # the median of three measured runs


def test_the_baseline_is_the_median_of_the_first_five_passing_runs(gates: list[Run]) -> None:
    assert len(gates) > FIRST_N, gates[-1].tail()
    assert f"set (passing run 2 of {FIRST_N})" in gates[1].output, gates[1].tail()
    last = gates[FIRST_N - 1]
    assert f"set (passing run {FIRST_N} of {FIRST_N})" in last.output, last.tail()
    assert "not yet a floor" in gates[1].output  # the catalog judged it
    assert baseline_set(gates[FIRST_N].output) is None, "a complete baseline moved"


def scatter_of(output: str) -> dict[int, float]:
    """The box's measured scatter per concurrency, as a gate line states it (a fraction)."""
    found = re.findall(r"throughput c=(\d+): .*?scatter ([\d.]+)%", output)
    return {int(c): float(x) / 100 for c, x in found}


def measured_of(output: str) -> dict[int, float]:
    """What a gate measured per concurrency (output tok/s, the median of its runs)."""
    found = re.findall(r"throughput c=(\d+): ([\d.]+) output tok/s", output)
    return {int(c): float(x) for c, x in found}


def test_the_first_baseline_set_is_within_10_percent_of_what_the_later_runs_measure(
    gates: list[Run],
) -> None:
    """The first host baseline a gate is judged on (first-N: the median of the first five
    passing runs, the first of them on the freshly restarted server) against what the server
    measures once it has run for a while: the median of the five further runs (6 to 10)
    per level.

    Within 10%, or within twice the box's own scatter where that is wider: no comparison
    resolves a difference inside its own noise. The scatter is the larger of the gate line's
    (the baseline's spread and one sweep's standard error, combined) and the scatter of the
    ten sweeps' figures around their median (robust CV): on this shared host the box's
    speed moves between sweeps minutes apart more than inside one sweep. Measured: on CI's
    slowed host runs 6 to 8 read 1,496 / 1,506 / 1,700 tok/s at c=8 against a baseline of
    1,667 (10.7%, the gate's scatter 6.7%); here once, the eight sweeps read 1,780 to 2,747
    tok/s at c=8 within five minutes (a robust CV of 23%).

    A level whose allowance would pass 20% is not judged: a baseline that low would hide the
    20% regression the gate must catch, and a cold baseline widens the between-sweeps
    scatter itself (four cold runs of five read as noise), so judging there would pass the
    very fault this looks for (37% low, issue 21). The test prints each level's resolution;
    when no level is resolved it is skipped, saying why, never passed.
    With 256 MiB of KV cache the first baseline read 10-16% low in the runs of 2026-12-07:
    a server's first minutes of load walk that cache, slowly on this VM (docs/proofs.md,
    "What a warm-up cannot warm"); the sandbox's 32 MiB is walked within the warm-up. A run
    or two in a slow spell of the host is what the median of five is for."""
    assert len(gates) >= QUIET, gates[-1].tail()
    first = baseline_set(gates[FIRST_N - 1].output)  # "set (passing run 5 of 5)"
    assert first is not None, gates[FIRST_N - 1].tail()
    sweeps = [measured_of(run.output) for run in gates[:QUIET]]
    for number, (run, measured) in enumerate(zip(gates, sweeps, strict=True), start=1):
        assert measured, f"run {number} measured nothing:\n{run.tail()}"
    later_runs = sweeps[FIRST_N:]
    scatter = scatter_of(gates[QUIET - 1].output)
    judged, unresolved = [], []
    for conc, figure in first.items():
        later = sorted(m[conc] for m in later_runs)[(len(later_runs) - 1) // 2]
        between = robust_cv([m[conc] for m in sweeps])
        allowed = max(0.10, RESOLVED_Z * max(scatter.get(conc, 0.0), between))
        line = (
            f"c={conc}: first baseline {figure:.1f}, later runs {later:.1f} "
            f"({figure / later - 1:+.1%}); allowed {allowed:.1%} (the gate's scatter "
            f"{scatter.get(conc, 0.0):.1%}, between sweeps {between:.1%})"
        )
        print(line)
        if allowed > UNRESOLVED_PAST:
            unresolved.append(line)
            continue
        judged.append(conc)
        assert abs(figure - later) <= allowed * later, (line, sweeps, scatter)
    if not judged:
        pytest.skip(
            f"the box's scatter cannot resolve a baseline {UNRESOLVED_PAST:.0%} low at any "
            f"level today: {'; '.join(unresolved)}"
        )


def below_lines(output: str) -> list[str]:
    """The gate lines of a run that read below their floor (after any confirming sweeps)."""
    return [
        line.strip()
        for line in re.findall(r"throughput c=\d+: .*", output.split("measuring once more")[-1])
        if "BELOW BASELINE" in line
    ]


def test_consecutive_quiet_gates_pass_on_the_complete_baseline(
    gates: list[Run], served: GuestConfig
) -> None:
    """Ten quiet gates in a row pass: the first five (the baseline's, judged on the catalog:
    the fixture stops at one that fails, which fails this), then runs 6 to 10 on a quiet
    server, judged on the complete host baseline.

    A quiet gate that fails only at levels its own line marks UNRESOLVED (this box's scatter
    times z past the catalog's tolerance: the floor sits inside the noise, and the gate warned
    so) is not a false failure this test can pin on the gate: it is skipped with the numbers,
    never passed. CI, 2026-12-03, a slowed host: c=1 230.9 tok/s against a floor of 231.2
    after nine runs read 170 to 279, the box's scatter 12.8% x 3 against a tolerance of 15%.
    A failure at a level the gate could resolve fails this test. Each of them prints floors
    the box's scatter set, within the profile's bounds."""
    assert len(gates) == QUIET, f"run {len(gates)} failed:\n{gates[-1].tail()}"
    assert served.profile.bench is not None
    inside_noise = []
    for number, run in enumerate(gates[FIRST_N:], start=FIRST_N + 1):
        assert_host_floors_within_tolerance(run.output, served.profile.bench)
        if run.rc != 0:
            below = below_lines(run.output)
            assert below, f"quiet gate {number} failed, not on throughput:\n{run.tail()}"
            resolved = [line for line in below if "UNRESOLVED" not in line]
            assert not resolved, f"quiet gate {number} failed:\n{run.tail()}"
            inside_noise += [f"gate {number}: {line}" for line in below]
            continue
        judged = re.findall(r"throughput c=\d+: .*host baseline of .* OK", run.output)
        assert len(judged) == 2, f"gate {number} not judged on the host baseline:\n{run.tail()}"
    if inside_noise:
        pytest.skip(
            "a quiet gate read below a floor that its own line says sits inside this box's "
            "noise today (no false failure can be told from the box's): " + "; ".join(inside_noise)
        )


# --- regressions ---------------------------------------------------------------------------


# The throttle, on the guest: SIGSTOP and SIGCONT to every process of the serving unit on a
# fixed clock, so the unit runs exactly running_s of every stopped_s + running_s seconds.
# (A shell loop of `systemctl kill` calls stopped it for however long systemctl took as well:
# 0.65-0.93 of the baseline for the "20%" drill, on the same box.)
THROTTLE = """
import os, signal, sys, time
group, stopped_s, running_s = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
roots = ("/sys/fs/cgroup", "/sys/fs/cgroup/systemd", "/sys/fs/cgroup/unified")
paths = [f"{r}{group}/cgroup.procs" for r in roots]
procs = next(p for p in paths if os.path.exists(p))
pids = [int(x) for x in open(procs).read().split()]
def send(sig):
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass
def stop(*_):
    send(signal.SIGCONT)
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
at = time.monotonic()
while True:
    send(signal.SIGSTOP)
    at += stopped_s
    time.sleep(max(0.0, at - time.monotonic()))
    send(signal.SIGCONT)
    at += running_s
    time.sleep(max(0.0, at - time.monotonic()))
"""


@contextmanager
def throttled(sandbox: SandboxState, stopped_s: float, running_s: float) -> Iterator[None]:
    """The serving unit runs running_s of every stopped_s + running_s seconds while the test
    runs; whole again after."""
    script = "/run/llmhost-drill-throttle.py"
    guest_sh(sandbox, f"cat > {script} <<'EOF'\n{THROTTLE}\nEOF")
    group = guest_sh(sandbox, f"systemctl show -p ControlGroup --value {UNIT}")
    guest_sh(
        sandbox,
        f"setsid -f sh -c 'echo $$ > {PIDFILE}; exec python3 {script} {group} {stopped_s} "
        f"{running_s}' </dev/null >/dev/null 2>&1",
    )
    try:
        yield
    finally:
        guest_sh(sandbox, f"kill $(cat {PIDFILE}) && rm -f {PIDFILE}", check=False)
        guest_sh(sandbox, f"systemctl kill -s CONT {UNIT}", check=False)


def judged_lines(output: str) -> list[tuple[float, float, str]]:
    """(measured, baseline, the rest) of each gate line after the confirming sweep."""
    assert "measuring once more to confirm" in output, output[-3000:]
    after = output.split("measuring once more")[-1]
    pattern = r"throughput c=\d+: ([\d.]+) output tok/s vs baseline ([\d.]+) (.*)"
    return [(float(m), float(b), rest) for m, b, rest in re.findall(pattern, after)]


def test_a_server_at_a_quarter_of_its_speed_fails_the_gate(
    sandbox: SandboxState, gates: list[Run], results_dir: str
) -> None:
    assert len(gates) > FIRST_N and gates[FIRST_N - 1].rc == 0, "no complete baseline"
    # One run a level, one warm-up run, no confirmation: a sweep at a quarter of the speed
    # takes four times as long, and a 4x loss needs no statistics to be seen.
    bench = {"runs": 1, "warmup_max_runs": 1, "confirm": False}
    verify = {"mode": "full", "results_dir": results_dir, "draft_ab": "never"}
    verify |= {"correctness": False, "bench": bench}
    with throttled(sandbox, stopped_s=0.3, running_s=0.1):
        slow = pyinfra(*SERVE, *GUEST_ONLY, "--data", f"verify={json.dumps(verify)}")
    assert slow.rc != 0, slow.tail()
    assert "throughput below baseline for tiny-llama" in slow.output, slow.tail()
    pattern = r"throughput c=\d+: ([\d.]+) output tok/s vs baseline ([\d.]+) (.*)"
    judged = [(float(m), float(b), rest) for m, b, rest in re.findall(pattern, slow.output)]
    failed = [x for x in judged if "BELOW BASELINE" in x[2]]
    assert failed and all("host baseline of" in rest for _, _, rest in failed), failed


def baselines_of(output: str) -> dict[int, float]:
    """The baseline each gate line was judged on, per concurrency."""
    found = re.findall(r"throughput c=(\d+): [\d.]+ output tok/s vs baseline ([\d.]+)", output)
    return {int(c): float(b) for c, b in found}


def assert_host_floors_within_tolerance(output: str, bench: BenchProfile) -> None:
    """Every level of a gate run is judged on the host baseline, its floor at baseline x (1 -
    margin) with the margin between the profile's min_tolerance and tolerance: read from the
    gate's own lines, exact, whatever the box's noise. A floor further down (the sandbox's
    used to sit at half the baseline) passes a 20% regression whatever a drill measures."""
    pattern = r"throughput c=(\d+): .*?\(floor [\d.]+ = baseline - ([\d.]+)%.*host baseline of"
    margins = {int(c): float(m) / 100 for c, m in re.findall(pattern, output)}
    assert len(margins) == len(bench.baselines), output[-3000:]
    rounding = 0.0005  # the line prints the margin to 0.1%
    low, high = bench.min_tolerance - rounding, bench.tolerance + rounding
    outside = {c: m for c, m in margins.items() if not low <= m <= high}
    assert not outside, f"margins {outside} outside [{bench.min_tolerance}, {bench.tolerance}]"


def stopped_share_for(now: dict[int, float], baseline: dict[int, float]) -> float:
    """The share of each throttle period the unit stays stopped so that it runs at four
    fifths of its baseline at every level, the box's speed being `now` (unthrottled, just
    measured): a fifth where the box runs at its baseline or slower, more where it has
    sped up since the baseline was set (10% faster: 27%). At most REGRESSION_AT_MOST: past
    that the drill would be the 4x one."""
    need = [1 - (1 - REGRESSION) * baseline[c] / now[c] for c in baseline if now.get(c)]
    return min(REGRESSION_AT_MOST, max([REGRESSION, *need]))


def unthrottled_gate(drill_data: str, context: str) -> dict[int, float]:
    """The drill's gate once more on the unthrottled server, at once: what the box does this
    minute. One that fails below its floor skips the drill (the box itself is below its
    baseline: no 20% regression can be told from it today, `context` says what was read); one
    that fails otherwise fails it."""
    box = pyinfra(*SERVE, *GUEST_ONLY, "--data", drill_data)
    now = measured_of(box.output)
    if box.rc != 0:
        assert "throughput below baseline" in box.output, box.tail()
        pytest.skip(
            f"the box itself is below its floor now, unthrottled ({now}): a 20% regression "
            f"cannot be told from it today; {context}"
        )
    return now


def test_a_20_percent_regression_fails_the_gate_where_the_catalog_passes_it(
    sandbox: SandboxState, gates: list[Run], drill_data: str, served: GuestConfig
) -> None:
    """A server throttled to at most four fifths of its host baseline (nominally: the throttle
    costs more than its share of the time, 0.65-0.78 of the baseline measured for a fifth
    stopped) fails the gate; the catalog's
    figure alone would have passed it. The sandbox's floor used to sit at half its baseline
    (tolerance 0.5) and passed such a server; the floor from its own scatter (max(8%, 3 x
    CV), at most 15%) must not, and every gate run here prints floors within those bounds
    (assert_host_floors_within_tolerance: exact, whatever the box's noise).

    Four fifths of the baseline, not of whatever the box does today: the throttle is sized
    on the server's unthrottled speed measured just before (the last quiet gate), so a box
    that sped up since its baseline was set is throttled harder (stopped_share_for). The
    attempts and what each read are printed.

    On a shared host the box's speed also moves within a minute, by more than 20% at times
    (CI, 2026-12-03: the gate read a throttled c=8 at 1,879 tok/s and the unthrottled server
    right after at 1,761). So a gate that passes the throttled server is judged on what its
    own sweep measured:
    - below the lowest floor a host baseline can get (baseline x (1 - tolerance)) at any
      level: the gate passed a regression it measured, and the drill fails at once;
    - otherwise the box's swing hid the throttle from the sweep: the same gate runs at once
      unthrottled, and the drill is tried again, sized on that figure, up to DRILL_ATTEMPTS
      times, then skipped with every attempt's numbers, never passed. (A throttle that stops
      nothing would hide here; the 4x drill, on the same throttle, fails the gate or fails.)
    An unthrottled gate that fails below its floor skips the drill (the box itself is below
    its baseline: no 20% can be told from it); one that fails otherwise fails it. Each attempt
    costs two gates (about a minute each on a slow day).

    When the gate fails the throttled server, the same gate runs unthrottled at once if the
    throttled server read half its baseline or less (a slowed box slows it too): the throttle
    must be seen costing about its share there, or the drill is skipped with the numbers (a
    failure of a far larger regression than 20% shows nothing about 20%)."""
    assert len(gates) > FIRST_N and gates[FIRST_N - 1].rc == 0, "no complete baseline"
    assert served.profile.bench is not None
    bench = served.profile.bench
    tolerance = bench.tolerance
    baseline = baselines_of(gates[-1].output)
    now = measured_of(gates[-1].output)
    assert baseline and now, gates[-1].tail()
    attempts: list[str] = []
    for attempt in range(1, DRILL_ATTEMPTS + 1):
        stopped = stopped_share_for(now, baseline)
        period = {"stopped_s": stopped * THROTTLE_PERIOD_S}
        with throttled(sandbox, running_s=(1 - stopped) * THROTTLE_PERIOD_S, **period):
            fifth = pyinfra(*SERVE, *GUEST_ONLY, "--data", drill_data)
        assert_host_floors_within_tolerance(fifth.output, bench)
        if fifth.rc != 0:
            break
        slow = measured_of(fifth.output)
        attempts.append(
            f"attempt {attempt}: stopped {stopped:.0%} of the time, sized on {now} against "
            f"the baseline {baseline}; the gate passed at {slow}"
        )
        missed = {c: x for c, x in slow.items() if x < baseline.get(c, 0.0) * (1 - tolerance)}
        assert not missed, f"the gate passed a regression its own sweep measured: {attempts}"
        now = unthrottled_gate(drill_data, "; ".join(attempts))
        attempts[-1] += f"; unthrottled right after: {now}"
    else:
        pytest.skip(
            "this box's speed swung by more than the throttle in every attempt, so no gate "
            "measured the server 20% below its baseline: " + "; ".join(attempts)
        )
    print("\n".join(attempts))
    assert "throughput below baseline for tiny-llama" in fifth.output, fifth.tail()
    judged = judged_lines(fifth.output)
    assert judged, fifth.tail()
    failed = [x for x in judged if "BELOW BASELINE" in x[2]]
    assert failed and all("host baseline of" in rest for _, _, rest in failed), failed
    # The catalog's figure alone would have passed this server: the host baseline caught it.
    catalog = [(m, float(re.findall(r"catalog ([\d.]+)", rest)[0])) for m, _, rest in failed]
    assert all(m >= c * (1 - tolerance) for m, c in catalog), catalog
    # What was caught is about the drill's fifth, not a slowed box: a box slowed for minutes
    # slows the throttled server with it (CI, 2026-12-02: once 31-33% of the baseline, while
    # the 4x drill took 99 s instead of 38). Then the same gate, unthrottled, at once, tells
    # the throttle's share from the box's.
    shares = [m / b for m, b, _ in judged]
    if all(x > 1 - REGRESSION_AT_MOST - 0.1 for x in shares):
        return
    slow = measured_of(fifth.output)
    now = unthrottled_gate(drill_data, f"throttled {slow}, {shares} of the baseline")
    throttle = [slow[c] / now[c] for c in slow if now.get(c)]
    assert throttle, (slow, now)
    # A fifth stopped read 0.65-0.78 of the unthrottled server; the band is that share's
    # (0.45-0.95 for a fifth), scaled to the share stopped.
    low = 0.45 * (1 - stopped) / (1 - REGRESSION)
    if not all(low < x < 0.95 for x in throttle):
        pytest.skip(
            f"the throttle, {stopped:.0%} stopped, read {throttle} of the unthrottled server "
            f"(throttled {slow}, unthrottled {now}, {shares} of the baseline), outside "
            f"{low:.2f}-0.95: what failed the gate is not shown to be a 20% regression"
        )
