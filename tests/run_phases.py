"""`make test` as timed phases: each phase's duration printed and saved, a day's speed beside them.

Why: a suite that needs 42 minutes on a good day times CI out on a slow one, and a slow day
must be told apart from a slow change. So the suite runs as named phases (unit, each
integration module, language, state, each benchmark, the VM), each timed with the share of the
machine's CPU it kept busy; a reference figure for the machine's speed that day
(`pyinfra <guest> exec -- true`, median of 3, before and after) is printed with them; the whole
is saved as JSON under the results directory (untracked). Every phase runs even when an earlier
one failed, so one run names every failure; the exit code is 1 when any phase failed. Past the
40-minute budget the runner says so, once when it crosses it and again in its last line.
Standard library only: it runs with the project's venv Python.

The phases that measure speed (the gate, the draft A/Bs, the benchmarks) run first, with
nothing beside them. A lane of phases that need no sandbox guest then runs beside the
remaining phases, one after another: the site contract, and the GRUB VM (about 8 minutes of
software emulation), at idle CPU and I/O priority (SCHED_IDLE, ionice idle): it gets only the
CPU they leave unused (a quarter to a half of two cores while they wait on readiness, health
windows and alerts): measured, it slowed the fleet module by 7-12% and took about ten minutes
off the total. The lane has the CPU to itself once they end; the runner then waits for it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import BinaryIO

REPO = Path(__file__).resolve().parent.parent
PY = sys.executable
PYINFRA = str(Path(PY).with_name("pyinfra"))
BUDGET_S = 40 * 60  # the suite's budget on a normal day (DEVELOPERS brief, issue 19)
SANDBOX_IP = "10.99.0.12"
STANDIN_IP = "10.99.0.13"
SSH_CONFIG = ".sandbox/ssh_config"
PYTEST = [PY, "-m", "pytest", "-p", "no:cacheprovider", "-v", "--durations=10"]


def results_dir() -> Path:
    """Where runs write what they measure: $LLMHOST_RESULTS_DIR, else <repo>/results (ignored)."""
    return Path(os.environ.get("LLMHOST_RESULTS_DIR", REPO / "results"))


# make test-vm's steps, with the pytest run's JUnit XML kept ({junit}): build and boot the
# GRUB VM, run its tests, stop it whatever they did (an interrupted boot wait too: the trap).
VM_SCRIPT = (
    "trap 'tests/vm/build_vm.sh stop' EXIT; tests/vm/build_vm.sh stop; "
    "tests/vm/build_vm.sh build && tests/vm/build_vm.sh start && "
    + " ".join(PYTEST)
    + " tests/vm --junitxml={junit}"
)


VM_STOP = ["tests/vm/build_vm.sh", "stop"]  # QEMU daemonizes into a session of its own


@dataclass
class Phase:
    name: str
    argv: list[str]
    junit: bool = False  # a pytest phase: its per-test times are read back from JUnit XML
    # Judges speed (a gate, an A/B, a benchmark): runs before anything runs beside the phases.
    quiet: bool = False
    # Runs beside the phases after the quiet ones (the lane: unit, contract, the VM, one
    # after another), at idle priority unless `idle` is off.
    beside: bool = False
    # Beside the others at SCHED_IDLE and idle I/O (the VM's emulation); off for a phase whose
    # tests time themselves (unit: Ctrl-C within 2 s), which then shares the CPU as equals.
    idle: bool = True
    # What stops what it leaves running outside its session when it is interrupted.
    cleanup: list[str] = field(default_factory=list)


@dataclass
class Outcome:
    name: str
    seconds: float
    rc: int
    slowest_tests: list[dict[str, object]] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)  # pytest's passed/failed/skipped
    # The machine's CPU kept busy while it ran (all cores, containers included): 0.0-1.0.
    cpu_busy: float | None = None
    beside: bool = False  # ran beside other phases (its seconds overlap theirs)
    # A failed phase's last lines, kept in the JSON (each cut to LINE_CHARS).
    tail: list[str] = field(default_factory=list)
    # A failed phase's lines that say why (errors, failures, tracebacks) from its whole log:
    # printed again under the summary, where a log cut to its end (CI's) still shows them.
    why: list[str] = field(default_factory=list)


def pytest_phase(name: str, *args: str, quiet: bool = False) -> Phase:
    return Phase(name, [*PYTEST, *args], junit=True, quiet=quiet)


# The integration modules that judge speed, in the order they run: the gates of the serve
# module's proofs and of a site rebuilt after a hard stop, the draft A/Bs (a draft must pay)
# of the spec-draft module and of the switch to a draft profile, and last the gate module's
# baselines and regressions, which restarts its server itself. It was put last when the gate's
# first runs after the guest's first deploy read 20-30% slow (2026-12-06); the cause was any
# server's first minutes of load on this VM, a walk of its KV cache, now short enough to end
# within the warm-up (llmhost/testbed/catalog.toml, kv_cache_memory_bytes). The order no
# longer carries the first baseline; it stays, as it costs nothing. The A/Bs alternate their
# arms, so a slow spell weighs on both.
QUIET_MODULES = (
    "test_serve_sandbox",
    "test_site_sandbox",
    "test_spec_draft_gate_sandbox",
    "test_switch_sandbox",
    "test_gate_sandbox",
)


# Quiet modules whose tests do not all judge speed: only those marked `quiet` run in the
# quiet phase; the rest (drills that load models and judge no speed) run in a phase of their
# own, `<module>/rest`, beside the VM, where the CPU their model loads leave idle goes to it.
SPLIT_MODULES = ("test_switch_sandbox",)
assert set(SPLIT_MODULES) <= set(QUIET_MODULES), "a split module's quiet half needs its place"


def phases() -> list[Phase]:
    """The suite, in order: the unit tests and the phases that judge speed, alone; then the
    lane (contract, the VM) beside the rest of the sandbox site's phases."""
    guest = ["--hosts=ssh://" + SANDBOX_IP, "--ssh-config=" + SSH_CONFIG]
    host = ["--hosts=ssh://" + STANDIN_IP, "--ssh-config=" + SSH_CONFIG]
    integration = sorted((REPO / "tests" / "integration").glob("test_*.py"))

    def module(path: Path) -> list[Phase]:
        rel, name = str(path.relative_to(REPO)), f"integration/{path.stem}"
        if path.stem in SPLIT_MODULES:
            return [
                pytest_phase(name, rel, "-m", "quiet", quiet=True),
                pytest_phase(f"{name}/rest", rel, "-m", "not quiet"),
            ]
        return [pytest_phase(name, rel, quiet=path.stem in QUIET_MODULES)]

    modules = [phase for p in integration for phase in module(p)]
    quiet = sorted(
        (p for p in modules if p.quiet),
        key=lambda p: QUIET_MODULES.index(p.name.removeprefix("integration/")),
    )
    # The lane beside the sandbox's phases, after those that judge speed: no guest of the
    # sandbox's in any of them. The site's own vLLM parsing every production argv (its lock,
    # a cached venv) first, the VM last. The unit tests stay in front, alone: a few dozen of
    # them time themselves (a Ctrl-C within 2 s, a probe's deadline at 0.3 s), which a
    # loaded machine would turn into flakes.
    contract = pytest_phase("contract", "tests/contract")
    lane = [
        replace(contract, beside=True),
        Phase("vm", ["bash", "-c", VM_SCRIPT], junit=True, beside=True, cleanup=VM_STOP),
    ]
    return [
        pytest_phase("unit", "tests/unit"),
        *quiet,
        Phase("bench/converge", [PY, "benchmarks/converge.py"], quiet=True),
        Phase("bench/switch_downtime", [PY, "benchmarks/switch_downtime.py"], quiet=True),
        *lane,
        *(p for p in modules if not p.quiet),
        pytest_phase("language", "tests/language"),
        pytest_phase("state/guest", "tests/state/guest", *guest),
        pytest_phase("state/host", "tests/state/host", *host),
    ]


def exec_true_seconds(runs: int = 3) -> float | None:
    """The day's speed: median wall time of `pyinfra <guest> exec -- true` (connect + one
    command); None when the guest cannot be reached, with pyinfra's last lines saying why."""
    key = REPO / ".sandbox" / "id_ed25519"
    argv = [
        *(PYINFRA, "-y", SANDBOX_IP, "--ssh-user", "root", "--ssh-key", str(key)),
        *("--data", "ssh_strict_host_key_checking=no"),
        *("--data", "ssh_known_hosts_file=/dev/null", "exec", "--", "true"),
    ]
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=120)
        if proc.returncode != 0:
            why = (proc.stdout + proc.stderr).strip().splitlines()[-6:]
            print(f"[make test] exec -- true on {SANDBOX_IP} failed (rc {proc.returncode}):")
            print("".join(f"  ! {line[:200]}\n" for line in why), end="", flush=True)
            return None
        times.append(time.perf_counter() - start)
    return round(statistics.median(times), 3)


def junit_tree(junit: Path) -> ET.Element:
    """A phase's JUnit XML; empty where a phase stopped hard left it half written."""
    try:
        return ET.parse(junit).getroot()
    except ET.ParseError:
        return ET.Element("testsuites")


def slowest_tests(junit: Path, top: int = 10) -> list[dict[str, object]]:
    if not junit.exists():
        return []
    cases = [
        {"test": f"{c.get('classname')}::{c.get('name')}", "seconds": float(c.get("time", 0))}
        for c in junit_tree(junit).iter("testcase")
    ]
    return sorted(cases, key=lambda c: -c["seconds"])[:top]


def test_counts(junit: Path) -> dict[str, int]:
    """passed / failed / skipped of one pytest phase, from its JUnit XML (errors count as
    failed); empty when pytest wrote none (it did not start)."""
    if not junit.exists():
        return {}
    counts = {"passed": 0, "failed": 0, "skipped": 0}
    for suite in junit_tree(junit).iter("testsuite"):
        tests, skipped = int(suite.get("tests", 0)), int(suite.get("skipped", 0))
        failed = int(suite.get("failures", 0)) + int(suite.get("errors", 0))
        counts["failed"] += failed
        counts["skipped"] += skipped
        counts["passed"] += tests - failed - skipped
    return counts


def cpu_ticks() -> tuple[int, int]:
    """(total, idle) jiffies of all CPUs since boot, from /proc/stat (containers included)."""
    with open("/proc/stat") as stat:
        values = [int(v) for v in stat.readline().split()[1:]]
    return sum(values), values[3] + values[4]  # idle + iowait


def busy_since(before: tuple[int, int]) -> float | None:
    return busy_between(before, cpu_ticks())


def busy_between(before: tuple[int, int], after: tuple[int, int]) -> float | None:
    spent = after[0] - before[0]
    return round(1 - (after[1] - before[1]) / spent, 3) if spent > 0 else None


def phase_argv(phase: Phase, scratch: Path) -> tuple[list[str], Path]:
    argv = list(phase.argv)
    junit = scratch / (phase.name.replace("/", "--") + ".xml")
    junit.unlink(missing_ok=True)  # a phase that writes none must not count an earlier run's
    if phase.junit and any("{junit}" in a for a in argv):
        argv = [a.replace("{junit}", str(junit)) for a in argv]
    elif phase.junit:
        argv.append(f"--junitxml={junit}")
    return argv, junit


TAIL_LINES = 40  # of a failed phase, in the JSON: pytest's short summary fits in it
WHY_LINES = 8  # of a failed phase, under the summary
LINE_CHARS = 300
# A line that says why a phase failed: pyinfra's "Error:" lines, a traceback's last line,
# pytest's FAILED lines; not the rows of pyinfra's results table (an "Error" column of counts).
WHY = re.compile(
    r"error|failed|traceback|exception|assert|timed? ?out|refused|interrupt", re.IGNORECASE
)
TABLE_ROW = re.compile(r"(\s+(\d+|-)){4}\s*$|^\W*Operation\s+Hosts\s+Success")


def why_lines(lines: list[str]) -> list[str]:
    """The last lines of a log that say why it failed, whitespace runs squeezed."""
    said = [" ".join(line.split()) for line in lines if WHY.search(line)]
    said = [line[:LINE_CHARS] for line in said if not TABLE_ROW.search(line) and line]
    return said[-WHY_LINES:]


def outcome(
    phase: Phase,
    took: float,
    rc: int,
    junit: Path,
    busy: float | None,
    log: Path,
    beside: bool = False,
) -> Outcome:
    tests = (slowest_tests(junit), test_counts(junit)) if phase.junit else ([], {})
    lines = log.read_text(errors="replace").splitlines() if rc and log.exists() else []
    return Outcome(
        phase.name,
        round(took, 1),
        rc,
        *tests,
        cpu_busy=busy,
        beside=beside,
        tail=[line[:LINE_CHARS] for line in lines[-TAIL_LINES:]],
        why=why_lines(lines),
    )


def echo_new(source: BinaryIO) -> None:
    """What the phase wrote to its log since the last look, onto our stdout; a stdout that
    went away (`| head`, a closed terminal) ends the echo, never the phase: the log keeps all."""
    data = source.read(1 << 20)
    while data:
        try:
            sys.stdout.buffer.write(data)
            sys.stdout.flush()
        except OSError:
            return
        data = source.read(1 << 20)


def stop_session(proc: subprocess.Popen[bytes]) -> None:
    """A phase's whole session stopped as a terminal's Ctrl-C would, then harder: SIGINT
    (10 s to end, its teardown included), SIGTERM (5 s), SIGKILL; a second Ctrl-C meanwhile
    does not cut it short."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        for sig, grace_s in ((signal.SIGINT, 10), (signal.SIGTERM, 5), (signal.SIGKILL, 5)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                continue
            with contextlib.suppress(ProcessLookupError):  # what the ended leader left behind
                os.killpg(proc.pid, signal.SIGKILL)
            break
    finally:
        signal.signal(signal.SIGINT, previous)


class Interrupted(KeyboardInterrupt):
    """Ctrl-C (or CI's timeout) during a foreground phase, with what that phase had done:
    its time and its log's lines that say where it stood (exit 130)."""

    def __init__(self, outcome: Outcome) -> None:
        super().__init__(outcome.name)
        self.outcome = outcome


def run_phase(phase: Phase, scratch: Path) -> Outcome:
    """The phase in the foreground, its output shown as it comes. The output goes through a
    log file, not a pipe: a process the phase leaves behind (an ssh master) holding the pipe
    open would otherwise keep the runner waiting after the phase ended."""
    argv, junit = phase_argv(phase, scratch)
    log_path = scratch / (phase.name.replace("/", "--") + ".out")
    print(f"\n[make test] === {phase.name}", flush=True)
    start, ticks = time.monotonic(), cpu_ticks()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}  # its output a file now, not a terminal
    with log_path.open("wb") as log, log_path.open("rb") as source:
        # A session of its own: Ctrl-C, CI's timeout, SIGTERM or SIGHUP reach it through
        # stop_session, which also ends what its teardown started after the signal.
        proc = subprocess.Popen(
            argv, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            while proc.poll() is None:
                echo_new(source)
                time.sleep(0.2)
        except BaseException as stopped:
            stop_session(proc)
            echo_new(source)
            if phase.cleanup:  # the VM run in the foreground: QEMU is not in its process group
                subprocess.run(phase.cleanup, cwd=REPO, check=False)
            if isinstance(stopped, KeyboardInterrupt):  # where it stood: CI's timeout's case
                took, busy = time.monotonic() - start, busy_since(ticks)
                raise Interrupted(outcome(phase, took, 130, junit, busy, log_path)) from None
            raise
        echo_new(source)
    took = time.monotonic() - start
    return outcome(phase, took, proc.returncode, junit, busy_since(ticks), log_path)


class Beside:
    """A phase running beside the others: its own session (so that it can be stopped whole),
    SCHED_IDLE and idle I/O class (inherited by every process it starts, QEMU's threads too),
    its output in a log printed when it ends.

    Its time is from its start to its own end, seen by a thread that waits for it: the runner
    only looks for it after the phases beside it, and timing it then gave it their length
    (the VM's 7.5 minutes read as 19 in docs/testing.md's runs until 2026-12-07)."""

    def __init__(self, phase: Phase, scratch: Path) -> None:
        self.phase = phase
        argv, self.junit = phase_argv(phase, scratch)
        self.log_path = scratch / (phase.name.replace("/", "--") + ".log")
        self.log = self.log_path.open("w")
        print(
            f"\n[make test] === {phase.name}: started beside the next phases"
            f"{' at idle CPU priority' if phase.idle else ''} (its output in {self.log_path}, "
            "printed when it ends)",
            flush=True,
        )
        self.start, self.ticks = time.monotonic(), cpu_ticks()
        idle = ["chrt", "--idle", "0", "ionice", "-c", "3"] if phase.idle else []
        self.proc = subprocess.Popen(
            [*idle, *argv],
            cwd=REPO,
            stdin=subprocess.DEVNULL,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.ended_at: tuple[float, tuple[int, int]] | None = None  # (monotonic, CPU ticks)
        self.waiter = threading.Thread(target=self._wait, daemon=True)
        self.waiter.start()

    def _wait(self) -> None:
        self.proc.wait()
        self.ended_at = (time.monotonic(), cpu_ticks())

    def finish(self) -> Outcome:
        print(f"\n[make test] === {self.phase.name}: waiting for it to end", flush=True)
        self.waiter.join()
        assert self.ended_at is not None
        rc, (end, ticks) = self.proc.returncode, self.ended_at
        self.log.close()
        print(self.log_path.read_text(errors="replace"), end="", flush=True)
        busy = busy_between(self.ticks, ticks)
        return outcome(
            self.phase, end - self.start, rc, self.junit, busy, self.log_path, beside=True
        )

    def stop(self) -> None:
        """Ctrl-C or CI's timeout: the phase's session first, then what it started outside it
        (the VM)."""
        for sig, grace_s in ((signal.SIGINT, 10), (signal.SIGTERM, 5), (signal.SIGKILL, 5)):
            if not self.session_alive():
                break
            os.killpg(self.proc.pid, sig)
            deadline = time.monotonic() + grace_s
            while self.session_alive() and time.monotonic() < deadline:
                time.sleep(0.1)
        if self.proc.poll() is None:
            self.proc.wait()
        if self.phase.cleanup:
            subprocess.run(self.phase.cleanup, cwd=REPO, check=False)
        self.log.close()
        tail = self.log_path.read_text(errors="replace").splitlines()[-20:]
        print("\n".join(f"  [{self.phase.name}] {line}" for line in tail), flush=True)

    def session_alive(self) -> bool:
        """Any process left in the phase's process group (not only its first one)."""
        self.proc.poll()  # reaps the leader, so that a dead one does not count
        try:
            os.killpg(self.proc.pid, 0)
        except ProcessLookupError:
            return False
        return True

    def ended(self) -> bool:
        return self.proc.poll() is not None


class Lane:
    """The phases beside the others, one after another (each a Beside), in a thread of its
    own: the lane goes on while the runner runs the sandbox's phases in front of it."""

    def __init__(self, phases: list[Phase], scratch: Path) -> None:
        self.phases, self.scratch = phases, scratch
        self.started: list[Beside] = []
        self.unstarted: list[Outcome] = []  # a phase whose start failed (chrt missing, say)
        self.stopping = False
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        for phase in self.phases:
            with self.lock:
                if self.stopping:
                    return
                try:
                    self.started.append(Beside(phase, self.scratch))
                except Exception as exc:  # noqa: BLE001 - a phase that cannot start fails
                    self.unstarted.append(
                        Outcome(phase.name, 0.0, 1, beside=True, why=[f"did not start: {exc}"])
                    )
                    continue
            self.started[-1].waiter.join()

    def current(self) -> str:
        return self.started[-1].phase.name if self.started else self.phases[0].name

    def ended(self) -> bool:
        return not self.thread.is_alive()

    def finish(self) -> list[Outcome]:
        """Each phase's outcome, waiting for the lane's end."""
        if not self.ended():
            print(f"\n[make test] === the lane beside: waiting for {self.current()}", flush=True)
        self.thread.join()
        return [beside.finish() for beside in self.started] + self.unstarted

    def stop(self) -> list[Outcome]:
        """Ctrl-C or CI's timeout: nothing more starts; the one running is stopped whole, those
        that ended are reported."""
        with self.lock:
            self.stopping = True
        running = [b for b in self.started if not b.ended()]
        for beside in running:
            beside.stop()
        self.thread.join(timeout=30)
        return [b.finish() for b in self.started if b not in running] + self.unstarted


def fmt(seconds: float) -> str:
    return f"{int(seconds) // 60}m{int(seconds) % 60:02d}s"


def shown_speed(speed: dict[str, float | None]) -> dict[str, str]:
    """The day's figures as printed: an interrupted run measures none after its phases."""
    return {k: "not measured" if v is None else f"{v}s" for k, v in speed.items()}


def summary(outcomes: list[Outcome], total: float, speed: dict[str, float | None]) -> str:
    lines = ["", "[make test] phases:"]
    for o in outcomes:
        verdict = "ok" if o.rc == 0 else f"FAILED (exit {o.rc})"
        busy = "" if o.cpu_busy is None else f"  CPU {o.cpu_busy:.0%} busy"
        beside = "  (beside the phases after the benchmarks)" if o.beside else ""
        lines.append(f"  {o.name:<44} {fmt(o.seconds):>7}  {verdict}{busy}{beside}")
    shown = shown_speed(speed)
    lines.append(
        "[make test] machine speed: pyinfra exec -- true "
        f"{shown['before']} before, {shown['after']} after "
        "(about 0.6 s on a normal day; twice that is a slow day)"
    )
    return "\n".join(lines)


def failure_tails(outcomes: list[Outcome], last: int = 4, width: int = 200) -> str:
    """Each failed phase's lines that say why, then its last lines that are not pyinfra's
    results table, next to the verdict: the end of a long log (all CI keeps in view) then
    says why, not only which phase."""
    out = []
    for o in outcomes:
        if not o.rc:
            continue
        out.append(f"[make test] {o.name} failed; why (the JSON keeps its last lines):")
        out.extend(f"  ! {line[:width]}" for line in o.why)
        ending = [" ".join(x.split()) for x in o.tail if x.strip() and not TABLE_ROW.search(x)]
        out.extend(f"  | {line[:width]}" for line in ending[-last:])
    return "".join(line + "\n" for line in out)


def interrupt(signum: int, frame: object) -> None:
    """SIGTERM and SIGHUP stop the run as Ctrl-C does: with its phases stopped and reported."""
    raise KeyboardInterrupt


def catch_ctrl_c() -> None:
    """Ctrl-C, SIGTERM and SIGHUP stop the run with its phases stopped and reported. SIGINT
    too is set explicitly: a shell starting make in the background (CI's scripts) leaves it
    ignored, and Python then keeps it so; CI's own timeout sends it."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, interrupt)
    signal.signal(signal.SIGHUP, interrupt)


def run_all(selected: list[Phase], scratch: Path, start: float) -> tuple[list[Outcome], str | None]:
    """Every selected phase, the lane beside the others started where its first phase stands
    in the order; (their outcomes, the phase interrupted or None). Whatever happens, no phase
    beside the others outlives the run."""
    outcomes: list[Outcome] = []
    warned = False
    interrupted = None
    lane: Lane | None = None
    try:
        for index, phase in enumerate(selected):
            try:
                if phase.beside and lane is not None:
                    continue  # in the lane already
                # Beside the others only when others follow; else the lane's phases just run.
                if phase.beside and any(not p.beside for p in selected[index + 1 :]):
                    lane = Lane([p for p in selected[index:] if p.beside], scratch)
                    continue
                outcomes.append(run_phase(phase, scratch))
                elapsed = time.monotonic() - start
                print(
                    f"[make test] {phase.name}: {fmt(outcomes[-1].seconds)}, {fmt(elapsed)} so far",
                    flush=True,
                )
                if elapsed > BUDGET_S and not warned:
                    warned = True
                    print(
                        f"[make test] WARNING: past the {BUDGET_S // 60}-minute budget", flush=True
                    )
            except KeyboardInterrupt as stop:  # CI's own timeout sends SIGINT: say where it stood
                interrupted = phase.name
                if isinstance(stop, Interrupted):
                    outcomes.append(stop.outcome)
                print(f"[make test] interrupted during {phase.name}", flush=True)
                break
        if lane is not None and (interrupted is None or lane.ended()):
            try:
                done = lane.finish()
            except KeyboardInterrupt:
                interrupted = interrupted or lane.current()
                print(f"[make test] interrupted during {lane.current()}", flush=True)
            else:
                lane = None  # its outcomes are in: the `finally` below reports none twice
                outcomes.extend(done)
                for outcome in done:
                    print(
                        f"[make test] {outcome.name}: {fmt(outcome.seconds)} beside the "
                        f"others, {fmt(time.monotonic() - start)} so far",
                        flush=True,
                    )
    finally:
        if lane is not None:
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C: cleanup goes on
            try:
                outcomes.extend(lane.stop())
            finally:
                signal.signal(signal.SIGINT, signal.default_int_handler)
            if interrupted is not None and lane.current() not in interrupted:
                interrupted += f" (and {lane.current()}, beside it)"
    return outcomes, interrupted


SUITES_KEPT = 3


def own_results_dir(out_dir: Path) -> Path:
    """A results directory of this run's own for every deploy it starts ($LLMHOST_RESULTS_DIR,
    which verify.results_dir's default follows): baselines and history that `make demo` or a
    user's runs left in results/ never judge the suite's gates, and the suite never adds to
    them. The last SUITES_KEPT are kept for a look afterwards."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    suite = out_dir / f"suite-{stamp}"
    suite.mkdir(parents=True, exist_ok=True)
    for old in sorted(out_dir.glob("suite-*"))[:-SUITES_KEPT]:
        shutil.rmtree(old, ignore_errors=True)
    os.environ["LLMHOST_RESULTS_DIR"] = str(suite)
    return suite


def main() -> int:
    catch_ctrl_c()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", default=[], help="run phases starting so")
    args = parser.parse_args()
    out_dir = results_dir() / "make-test"
    scratch = out_dir / "junit"
    scratch.mkdir(parents=True, exist_ok=True)
    suite = own_results_dir(out_dir)
    print(f"[make test] the deploys' results (gates, baselines, switches) go to {suite}")
    wanted = tuple(args.only)
    selected = [p for p in phases() if not wanted or p.name.startswith(wanted)]
    start = time.monotonic()
    speed: dict[str, float | None] = {"before": exec_true_seconds(), "after": None}
    day = shown_speed(speed)["before"]
    print(f"[make test] machine speed: pyinfra exec -- true {day}", flush=True)
    outcomes, interrupted = run_all(selected, scratch, start)
    if interrupted is None:
        speed["after"] = exec_true_seconds()
    total = time.monotonic() - start
    failed = [o.name for o in outcomes if o.rc != 0]
    totals = {k: sum(o.counts.get(k, 0) for o in outcomes) for k in ("passed", "failed", "skipped")}
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    record = {
        "benchmark": "make-test-phases",
        "time": datetime.now(UTC).isoformat(timespec="seconds"),
        "git_sha": subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True
        ).stdout.strip(),
        "machine": platform.node(),
        "cpus": os.cpu_count(),
        "exec_true_median_s": speed,
        "total_s": round(total, 1),
        "budget_s": BUDGET_S,
        "failed": failed,
        "interrupted_in": interrupted,
        "tests": totals,
        "phases": [asdict(o) for o in outcomes],
    }
    path = out_dir / f"phases-{stamp}.json"
    path.write_text(json.dumps(record, indent=2) + "\n")
    print(summary(outcomes, total, speed))
    over = f", OVER the {BUDGET_S // 60}-minute budget" if total > BUDGET_S else ""
    shown = path.relative_to(REPO) if path.is_relative_to(REPO) else path
    print(f"[make test] phases saved to {shown}")
    print(failure_tails(outcomes), end="")
    # pytest's counts over every phase, as one plain closing line (the phases' own lines are
    # scattered above); a phase that is not pytest (a benchmark, the VM's make) counts as one.
    others = [o for o in outcomes if not o.counts]
    passed = totals["passed"] + sum(o.rc == 0 for o in others)
    failures = totals["failed"] + sum(o.rc != 0 for o in others)
    print(f"make-test: {passed} passed, {failures} failed, {totals['skipped']} skipped")
    if interrupted is not None:
        verdict = f"exit 130: interrupted during {interrupted}"
    elif failed:
        verdict = "exit 1: failed " + ", ".join(failed)
    else:
        verdict = "exit 0"
    shown = shown_speed(speed)
    print(
        f"[make test] finished in {int(total)}s ({fmt(total)}, budget {BUDGET_S}s{over}; "
        f"exec -- true {shown['before']}/{shown['after']}, 0.6 normal), {verdict}",
        flush=True,
    )
    if interrupted is not None:
        return 130
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
