"""Switching the served model: stop the old unit, and roll back by itself when proofs fail.

The order of a switch (tasks/serving_guest.py): stage the new venv and weights while the old
model serves; `switch_stop` (the last answer of the old model, stop and disable it, GPUs
free, the record says "pending"); start the new unit; readiness, correctness, gate, A/B,
each under `rolls_back(guard)`; `switch_commit` (record, summary, downtime JSON).

Any failure after the old unit stopped rolls back inside the failing proof: the new unit is
stopped and disabled, the GPUs freed, the previous unit enabled and started, its readiness
and correctness proven, and the run fails naming what failed and that the previous model
serves again. Ctrl-C does not roll back (that is a second load): it prints where the
switch stands, and the next run finishes it or rolls it back.
"""

from __future__ import annotations

import datetime as dt
import json
import shlex
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import SecretStr
from pyinfra import host
from pyinfra.api import OperationError, StringCommand, operation
from pyinfra.context import state

from llmhost import interrupt
from llmhost.interrupt import interruptible
from llmhost.operations.failure import fails_its_host
from llmhost.operations.log import say
from llmhost.operations.rollback import rolls_back
from llmhost.operations.verify import CorrectnessCheck
from llmhost.readiness import auth_headers, probe_once, wait_ready
from llmhost.switching import ServingRecord, SwitchPlan, unit_of


@dataclass(frozen=True)
class RollbackTarget:
    """The model a switch leaves: how to reach it again and prove it answers right."""

    model: str
    base_url: str
    served_name: str
    load_timeout_s: int
    check: CorrectnessCheck | None  # None: the profile has no correctness probe
    api_key: SecretStr | None = field(default=None, repr=False, compare=False)


@dataclass
class SwitchGuard:
    """One host's switch in flight: armed once the old unit is stopped; its timings."""

    plan: SwitchPlan
    host_name: str
    record_path: str  # <root>/state/serving.json on the guest
    target_unit: str
    source: RollbackTarget | None
    gpu_free: str  # the guest's GPU cleanup command (verifies memory is free)
    results_dir: str
    stopping: bool = False  # set by switch_stop when it begins: from then on, roll back
    stage_started: float = field(default_factory=time.time)
    stopped_at: float | None = None
    last_answer: float | None = None
    first_answer: float | None = None
    verdicts: dict[str, str] = field(default_factory=dict)
    stage: str = "staging"  # staging, stopping, stopped, starting, loading, answers, rolling back

    def armed(self) -> bool:
        """The old model no longer serves: a failure now must bring it back."""
        if not self.plan.switching:
            return False
        return self.plan.resumed or self.stopping

    def answered(self) -> None:
        if self.first_answer is None and self.armed():
            self.first_answer = time.time()
            self.stage = "answers"

    def downtime_s(self) -> float | None:
        if self.first_answer is None or self.last_answer is None:
            return None
        return round(self.first_answer - self.last_answer, 1)

    def on_interrupt(self) -> str | None:
        """What Ctrl-C prints about this switch (interrupt.describe_state_with)."""
        if self.armed():
            return f"{self.host_name}: {self.where()}"
        if self.plan.switching:
            return f"{self.host_name}: switch to {self.plan.target} interrupted while staging: " + (
                f"{self.plan.source} still serves"
            )
        return None

    def where(self) -> str:
        """Exactly where an interrupted switch left the guest, and how to go on."""
        source, target = self.plan.source, self.plan.target
        old, new = unit_of(str(source)), self.target_unit
        states = {
            "stopping": f"{old} was being stopped (it may still be stopping); {new} not started",
            "stopped": f"{old} is stopped and disabled; {new} is not started: NOTHING SERVES",
            "starting": f"{old} is stopped and disabled; {new} was being started",
            "loading": f"{old} is stopped and disabled; {new} is enabled and loading",
            "answers": f"{old} is stopped and disabled; {new} serves, its proofs were running",
            "rolling back": f"the rollback to {source} was under way: {new} may be stopped, "
            f"{old} may be starting",
        }
        return (
            f"switch {source} -> {target} interrupted: {states.get(self.stage, self.stage)} "
            f"(files and weights of both kept). Rerun the same command to finish the switch "
            f"(it rolls back to {source} if {target} fails its proofs), or `systemctl enable "
            f"--now {old}` on the guest to serve {source} again"
        )

    def roll_back(self, failure: BaseException) -> None:
        """Stop the new unit, free the GPUs, serve the previous model again; always raises."""
        why = str(failure).strip() or type(failure).__name__
        source = self.source
        assert source is not None
        say(f"ROLLBACK: {self.plan.target} failed ({why.splitlines()[0]}); back to {source.model}")
        self.stage = "rolling back"
        try:
            with interruptible(f"the rollback to {source.model}"):
                waited, lines = self._serve_source_again(source)
        except interrupt.Interrupted:
            raise
        except Exception as exc:
            raise OperationError(
                f"switch {source.model} -> {self.plan.target} FAILED: {why}\n"
                f"ROLLBACK FAILED TOO: {exc}\n{self.where()}"
            ) from None
        record = self.plan.rolled_back(why, time.time())
        self._write_record(record)
        raise OperationError(
            f"switch {source.model} -> {self.plan.target} FAILED: {why}\n"
            f"ROLLED BACK: {source.model} serves again ({unit_of(source.model)}: ready after "
            f"{waited:.0f}s{lines}); {self.plan.target}'s unit is stopped and disabled"
        ) from None

    def _serve_source_again(self, source: RollbackTarget) -> tuple[float, str]:
        q = shlex.quote
        # In its own session: the rollback completes even if this run's ssh session dies.
        script = (
            f"systemctl disable --now {q(self.target_unit)}; {self.gpu_free} && "
            f"systemctl enable --now {q(unit_of(source.model))}"
        )
        ok, out = host.run_shell_command(
            StringCommand(f"setsid -w sh -c {q(script)} </dev/null"), print_output=False
        )
        if not ok:
            raise OperationError(
                f"could not start {unit_of(source.model)}: " + "\n".join(out.stderr_lines[-10:])
            )
        result = wait_ready(
            source.base_url,
            source.served_name,
            source.load_timeout_s,
            log=say,
            interval_s=1.0,
            headers=auth_headers(source.api_key),
        )
        if not result.ready:
            raise OperationError(
                f"{unit_of(source.model)} not ready at stage {result.stage}: {result.detail}"
            )
        if source.check is None:
            return result.waited_s, ", no correctness probe"
        return result.waited_s, f", correctness OK: {source.check.run()}"

    def _write_record(self, record: ServingRecord) -> None:
        ok, out = host.run_shell_command(StringCommand(record_command(self.record_path, record)))
        if not ok:
            say(f"could not write {self.record_path}: {' '.join(out.stderr_lines)}")

    def summary(self) -> dict[str, Any]:
        staging = (self.stopped_at or time.time()) - self.stage_started
        return {
            "host": host.name,
            "from": self.plan.source,
            "to": self.plan.target,
            "staging_s": round(staging, 1),
            "downtime_s": self.downtime_s(),
            "gate": self.verdicts.get("gate", "not run"),
            "resumed": self.plan.resumed,
            "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        }


def record_command(path: str, record: ServingRecord) -> str:
    """Write the guest's serving record atomically (a temp file, then rename)."""
    q = shlex.quote
    return (
        f"mkdir -p {q(str(Path(path).parent))} && printf '%s\\n' {q(record.dump())} "
        f"> {q(path + '.tmp')} && mv -f {q(path + '.tmp')} {q(path)}"
    )


def last_answer(source: RollbackTarget) -> float | None:
    """The old model's last answer (readiness's probe: a one-token completion) just before it
    stops: downtime starts here."""
    answered = probe_once(source.base_url, source.served_name, headers=auth_headers(source.api_key))
    return time.time() if answered.ready else None


@operation()
@fails_its_host
def switch_stop(guard: SwitchGuard):
    """
    Stop and disable the old model's unit, verify the GPUs are free, record "pending".

    A change: it stops a unit. Its files and weights stay for the rollback. From here on a
    failure rolls back, this step's own included (GPU memory still held after the stop).

    + guard: the switch in flight (its plan names the old model)
    """
    plan = guard.plan
    source = plan.source
    if not plan.switching or plan.resumed or source is None:
        host.noop("no model to stop")
        return
    pending = record_command(guard.record_path, plan.pending_record(time.time()))
    # The record says "pending" before the old unit stops: a run that dies in between is
    # finished (or rolled back) by the next one.
    stop = (
        f"{pending} && systemctl disable --now {shlex.quote(unit_of(source))} && {guard.gpu_free}"
    )
    if not state.is_executing:
        yield stop  # what --dry shows; run below, under the guard, when the run executes
        return
    guard.stopped_at = time.time()
    if guard.source is not None:
        guard.last_answer = last_answer(guard.source) or guard.stopped_at
    say(f"switch {source} -> {plan.target}: staged; stopping {unit_of(source)}")
    guard.stopping = True  # armed: the old model no longer serves from here on
    guard.stage = "stopping"
    with rolls_back(guard):
        ok, out = host.run_shell_command(StringCommand(stop))
        if not ok:
            raise OperationError(
                f"stopping {unit_of(source)} or freeing the GPUs failed: "
                + " ".join(out.stderr_lines[-5:] or out.stdout_lines[-5:])
            )
    guard.stage = "stopped"
    # A change was made (a unit stopped); this read only makes pyinfra count it as one.
    yield f"systemctl show -p ActiveState --value {shlex.quote(unit_of(source))}"


@operation()
@fails_its_host
def switch_start(guard: SwitchGuard, unit: str):
    """
    Enable and start the new model's unit, under the guard: a start that fails rolls back.

    + guard: the switch in flight
    + unit: the new model's unit
    """
    command = f"systemctl enable --now {shlex.quote(unit)}"
    if not state.is_executing:
        yield command
        return
    guard.stage = "starting"
    with rolls_back(guard):
        ok, out = host.run_shell_command(StringCommand(command))
        if not ok:
            raise OperationError(
                f"{unit} did not start: " + " ".join(out.stderr_lines[-5:] or out.stdout_lines[-5:])
            )
    guard.stage = "loading"
    yield f"systemctl is-enabled --quiet {shlex.quote(unit)}"


@operation()
@fails_its_host
def switch_commit(guard: SwitchGuard, record_text: str | None):
    """
    The new model passed its proofs: record it (and what served before), print the summary.

    + guard: the switch in flight (or a run that switched nothing)
    + record_text: the guest's record as read at the start of the run
    """
    plan = guard.plan
    if state.is_executing and plan.switching:
        summary = guard.summary()
        for line in summary_lines(summary):
            say(line)
        path = save_switch(Path(guard.results_dir), summary)
        say(f"switch results: {path}")
    if (record_text or "").strip() == plan.committed.dump():
        host.noop(f"{plan.target} is the recorded model")
        return
    yield record_command(guard.record_path, plan.committed)


def summary_lines(summary: dict[str, Any]) -> list[str]:
    downtime = summary["downtime_s"]
    return [
        "=" * 60,
        f"SWITCH {summary['from']} -> {summary['to']}: done",
        (
            f"  resumed an interrupted switch: {summary['from']} was already stopped"
            if summary.get("resumed")
            else f"  staging (while {summary['from']} served): {summary['staging_s']:.0f}s"
        ),
        "  downtime (last answer -> first answer): "
        + (f"{downtime:.1f}s" if downtime is not None else "not measured"),
        f"  throughput gate: {summary['gate']}",
        "=" * 60,
    ]


def save_switch(results_dir: Path, summary: dict[str, Any]) -> Path:
    """One JSON per switch beside the host's benchmark results."""
    from llmhost.bench.history import host_dir

    directory = host_dir(results_dir.absolute(), str(summary["host"]))
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    path = directory / f"{stamp}-switch-{summary['from']}-to-{summary['to']}.json"
    path.write_text(json.dumps(summary, indent=2) + "\n")
    return path
