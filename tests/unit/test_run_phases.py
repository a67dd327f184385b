"""make test's runner (tests/run_phases.py): the order that keeps speed judged on a quiet
machine, and the VM beside the other phases at idle priority, stopped whole on Ctrl-C."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

from tests import run_phases
from tests.run_phases import Beside, Phase

PROBE = "import os, sys; print('idle' if os.sched_getscheduler(0) == os.SCHED_IDLE else 'other')"


def test_every_phase_that_judges_speed_runs_before_the_vm_starts_beside_the_rest() -> None:
    names = [p.name for p in run_phases.phases()]
    vm = names.index("vm")
    beside = [p for p in run_phases.phases() if p.beside]
    # The lane: the site's contract, then the VM, after the phases that judge speed; the
    # unit tests first of all, alone (some time themselves).
    assert [(p.name, p.idle) for p in beside] == [("contract", True), ("vm", True)]
    assert beside[-1].cleanup == run_phases.VM_STOP
    quiet = [i for i, p in enumerate(run_phases.phases()) if p.quiet]
    assert names[0] == "unit" and quiet and max(quiet) < names.index("contract") < vm, names
    for module in run_phases.QUIET_MODULES:
        assert names.index(f"integration/{module}") < vm
    # In their own order, the gate module last of them (after the first deploy's slow spell).
    order = [n.removeprefix("integration/") for n in names[:vm] if n.startswith("integration/")]
    assert order == list(run_phases.QUIET_MODULES) and order[-1] == "test_gate_sandbox"
    # Every phase is still there: the other modules, language and state after the VM.
    assert vm < names.index("language") < names.index("state/host")
    modules = sorted(Path(run_phases.REPO, "tests", "integration").glob("test_*.py"))
    assert {f"integration/{m.stem}" for m in modules} <= set(names)


def test_a_phase_beside_the_others_runs_at_idle_cpu_priority(tmp_path: Path) -> None:
    phase = Phase("probe", [sys.executable, "-c", PROBE], beside=True)
    outcome = Beside(phase, tmp_path).finish()
    assert outcome.rc == 0 and outcome.beside
    assert (tmp_path / "probe.log").read_text().strip() == "idle"
    assert outcome.cpu_busy is not None and 0.0 <= outcome.cpu_busy <= 1.0


def test_stopping_a_phase_beside_ends_its_session_and_runs_its_cleanup(tmp_path: Path) -> None:
    marker = tmp_path / "cleaned"
    # As under a terminal's Ctrl-C: SIGINT's default action (a job started in the background
    # may inherit it ignored).
    child = (
        "import signal, subprocess, time; signal.signal(signal.SIGINT, signal.SIG_DFL); "
        "subprocess.Popen(['sleep', '300']); time.sleep(300)"
    )
    phase = Phase(
        "sleeper",
        [sys.executable, "-c", child],
        beside=True,
        cleanup=["touch", str(marker)],
    )
    beside = Beside(phase, tmp_path)
    time.sleep(1)
    start = time.monotonic()
    beside.stop()
    assert time.monotonic() - start < 5
    assert beside.proc.returncode is not None
    assert marker.exists()
    # Nothing of its session is left: the grandchild sleep went with it (reaped by init).
    deadline = time.monotonic() + 5
    while session_left(beside.proc.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert session_left(beside.proc.pid) == []


def session_left(sid: int) -> list[str]:
    """Live processes (not zombies) of a session."""
    ps = subprocess.run(["ps", "-s", str(sid), "-o", "pid=,stat="], capture_output=True, text=True)
    return [line for line in ps.stdout.splitlines() if line.split()[1][0] != "Z"]


def test_the_phase_beside_is_waited_for_and_reported_after_the_others(tmp_path: Path) -> None:
    beside = Phase("slow", [sys.executable, "-c", "import time; time.sleep(1); print('vm done')"])
    beside.beside = True
    after = Phase("after", [sys.executable, "-c", "print('after')"])
    outcomes, interrupted = run_phases.run_all([beside, after], tmp_path, time.monotonic())
    assert interrupted is None
    assert [(o.name, o.rc, o.beside) for o in outcomes] == [("after", 0, False), ("slow", 0, True)]
    assert (tmp_path / "slow.log").read_text() == "vm done\n"


def test_the_phase_beside_is_timed_to_its_own_end_not_to_the_phases_after_it(
    tmp_path: Path,
) -> None:
    """The VM ended after 7.5 minutes and read as 19: it was timed when the runner came back
    to it, after the phases beside it."""
    beside = Phase("quick", [sys.executable, "-c", "pass"], beside=True)
    after = Phase("long", [sys.executable, "-c", "import time; time.sleep(3)"])
    outcomes, _ = run_phases.run_all([beside, after], tmp_path, time.monotonic())
    took = {o.name: o.seconds for o in outcomes}
    assert took["long"] >= 3 and took["quick"] < 2, took


def test_ctrl_c_in_a_phase_stops_the_one_beside_it_and_names_both(tmp_path: Path) -> None:
    marker = tmp_path / "vm-stopped"
    sleeper = "import signal, time; signal.signal(signal.SIGINT, signal.SIG_DFL); time.sleep(300)"
    beside = Phase(
        "vm", [sys.executable, "-c", sleeper], beside=True, cleanup=["touch", str(marker)]
    )
    ctrl_c = "import os, signal; os.kill(os.getppid(), signal.SIGINT)"  # as a terminal would
    phase = Phase("integration/x", [sys.executable, "-c", ctrl_c])
    start = time.monotonic()
    outcomes, interrupted = run_phases.run_all([beside, phase], tmp_path, start)
    assert time.monotonic() - start < 10
    assert interrupted == "integration/x (and vm, beside it)"
    assert [(o.name, o.rc) for o in outcomes] == [("integration/x", 130)] and marker.exists()


def test_the_lane_runs_its_phases_one_after_another_beside_the_others(tmp_path: Path) -> None:
    """unit, contract and the VM share one lane: the second starts when the first ends, the
    front phases meanwhile go on; a phase marked not idle runs at normal priority."""
    stamp = "import time, pathlib; pathlib.Path({!r}).write_text(str(time.monotonic()))"
    first = Phase(
        "unit",
        [sys.executable, "-c", PROBE + "; import time; time.sleep(1)"],
        beside=True,
        idle=False,
    )
    second = Phase("vm", [sys.executable, "-c", stamp.format(str(tmp_path / "vm-start"))])
    second.beside = True
    front = Phase("front", [sys.executable, "-c", "import time; time.sleep(2)"])
    start = time.monotonic()
    outcomes, interrupted = run_phases.run_all([first, second, front], tmp_path, start)
    assert interrupted is None
    assert [(o.name, o.rc, o.beside) for o in outcomes] == [
        ("front", 0, False),
        ("unit", 0, True),
        ("vm", 0, True),
    ]
    assert (tmp_path / "unit.log").read_text().strip() == "other"  # not SCHED_IDLE
    vm_started = float((tmp_path / "vm-start").read_text()) - start
    assert vm_started >= 1, vm_started  # after unit's end
    assert time.monotonic() - start < 10  # beside the front phase, not after it


def test_a_lane_phase_that_cannot_start_fails_and_the_lane_goes_on(tmp_path: Path) -> None:
    """A start that raises (a missing program) is a failed phase in the summary, not a
    thread's traceback that leaves the phase, and every one after it, out of the run."""
    broken = Phase("contract", ["/nonexistent/pytest"], beside=True, idle=False)
    vm = Phase("vm", [sys.executable, "-c", "pass"], beside=True)
    front = Phase("front", [sys.executable, "-c", "import time; time.sleep(0.5)"])
    outcomes, interrupted = run_phases.run_all([broken, vm, front], tmp_path, time.monotonic())
    assert interrupted is None
    got = {o.name: (o.rc, o.beside) for o in outcomes}
    assert got == {"front": (0, False), "vm": (0, True), "contract": (1, True)}
    assert next(o for o in outcomes if o.name == "contract").why[0].startswith("did not start")


def test_a_vm_phase_selected_last_runs_in_the_foreground(tmp_path: Path) -> None:
    """Beside only when other phases follow it: last (or alone), it is simply run."""
    vm = Phase("vm", [sys.executable, "-c", PROBE], beside=True)
    outcomes, _ = run_phases.run_all([vm], tmp_path, time.monotonic())
    assert [(o.name, o.beside) for o in outcomes] == [("vm", False)]
    assert not (tmp_path / "vm.log").exists()


def test_a_failed_phase_says_why_again_next_to_the_verdict(tmp_path: Path) -> None:
    """CI keeps only the end of the log in view: a failed phase's lines that say why (here a
    pyinfra error far above a results table whose rows have an Error column) are printed
    again there, and an ended phase is not waited on for what it left running."""
    failing = (
        "import subprocess, sys; subprocess.Popen(['sleep', '30']); "  # holds stdout open
        "print('[10.99.0.12] Error: systemctl start timed out'); "
        "print('\\n'.join(f'line {i}' for i in range(50))); "
        "print('    Operation    Hosts   Success   Error   No Change'); "
        "print('    remove drop-ins of x.service' + ' ' * 90 + '1  -  1  -'); "
        "print('x' * 900); sys.exit('the deploy failed: why')"
    )
    start = time.monotonic()
    outcomes, interrupted = run_phases.run_all(
        [Phase("bench/x", [sys.executable, "-c", failing]), Phase("ok", ["true"])],
        tmp_path,
        start,
    )
    assert time.monotonic() - start < 10 and interrupted is None
    failed, passed = outcomes
    assert failed.rc == 1 and failed.tail[-1] == "the deploy failed: why"
    assert len(failed.tail) == run_phases.TAIL_LINES
    assert max(map(len, failed.tail)) == run_phases.LINE_CHARS
    assert failed.why == ["[10.99.0.12] Error: systemctl start timed out", "the deploy failed: why"]
    assert passed.rc == 0 and passed.tail == [] and passed.why == []
    shown = run_phases.failure_tails(outcomes).splitlines()
    assert shown[0].startswith("[make test] bench/x failed")
    assert shown[1] == "  ! [10.99.0.12] Error: systemctl start timed out"
    assert shown[-1] == "  | the deploy failed: why" and "line 49" in shown[-3]
    assert not any("drop-ins" in line for line in shown) and len("".join(shown)) < 1000


def test_a_split_module_runs_its_quiet_tests_first_and_the_rest_beside_the_vm() -> None:
    """Every test of a split module runs in exactly one of its two phases; those that judge
    speed (marked quiet) before the VM starts, the others after it."""
    names = [p.name for p in run_phases.phases()]
    for stem in run_phases.SPLIT_MODULES:
        module = f"tests/integration/{stem}.py"
        assert names.index(f"integration/{stem}") < names.index("vm")
        assert names.index(f"integration/{stem}/rest") > names.index("vm")

        def collected(marker: str, module: str = module) -> set[str]:
            argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--collect-only"]
            proc = subprocess.run(
                [*argv, "-q", "-m", marker, module],
                cwd=run_phases.REPO,
                capture_output=True,
                text=True,
            )
            return {line for line in proc.stdout.splitlines() if line.startswith(module)}

        quiet, rest, every = collected("quiet"), collected("not quiet"), collected("")
        assert quiet and rest and not quiet & rest and quiet | rest == every, (quiet, rest)


def test_ctrl_c_in_a_foreground_phase_ends_its_whole_session(tmp_path: Path) -> None:
    """The phase runs in a session of its own: Ctrl-C reaches it through the runner, and
    what it started (a deploy its teardown began) ends with it. The runner is a process of
    its own here, as under make: a signal sent from a thread of the test process would land
    in whichever greenlet gevent (patched in by pyinfra's CLI) happened to run."""
    started = tmp_path / "sid"
    phase_code = (
        "import os, subprocess, time; subprocess.Popen(['sleep', '300']); "
        f"open({str(started)!r} + '.tmp', 'w').write(str(os.getsid(0))); "
        f"os.rename({str(started)!r} + '.tmp', {str(started)!r}); time.sleep(300)"
    )
    runner_code = (
        "import sys, time; from tests import run_phases; from tests.run_phases import Phase; "
        "run_phases.catch_ctrl_c(); "
        f"phase = Phase('integration/x', [sys.executable, '-c', {phase_code!r}]); "
        f"outcomes, interrupted = run_phases.run_all([phase], Path({str(tmp_path)!r}), "
        "time.monotonic()); print('RESULT', interrupted, [(o.name, o.rc) for o in outcomes], "
        "[line for o in outcomes for line in o.why])"
    )
    runner = subprocess.Popen(
        [sys.executable, "-c", "from pathlib import Path; " + runner_code],
        cwd=run_phases.REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    deadline = time.monotonic() + 30
    while not started.exists() and time.monotonic() < deadline and runner.poll() is None:
        time.sleep(0.1)
    assert started.exists(), runner.communicate(timeout=5)[0] if runner.poll() is not None else ""
    begun = time.monotonic()
    runner.send_signal(signal.SIGINT)
    out, _ = runner.communicate(timeout=30)
    assert time.monotonic() - begun < 20, out
    # The phase's outcome says where it stood: exit 130, its log's last word (the traceback).
    assert "RESULT integration/x [('integration/x', 130)] " in out, out
    assert out.split("RESULT")[1].rstrip().endswith("'KeyboardInterrupt']"), out
    sid, left = started.read_text().strip(), ["?"]
    for _ in range(50):  # a killed process is gone once its new parent has reaped it
        ps = subprocess.run(["ps", "-s", sid, "-o", "pid=,stat="], capture_output=True, text=True)
        left = [line for line in ps.stdout.splitlines() if not line.split()[1].startswith("Z")]
        if not left:
            break
        time.sleep(0.1)
    assert left == [], f"left running in its session: {left}"
