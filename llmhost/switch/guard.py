"""One host's switch in flight: its stage, its timings, its rollback and its record.

A proof that fails ends the host's run, so no later step could undo a switch: the rollback
runs inside the failing step (operations/rollback.py asks the guard). The guard reaches the
guest through the `Shell` it was given and prints through its `Log`; it knows nothing of
pyinfra. Its stage (stages.py) says whether a failure rolls back and what Ctrl-C prints.
"""

from __future__ import annotations

import datetime as dt
import json
import shlex
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llmhost.endpoint import Endpoint
from llmhost.interrupt import Interrupted, interruptible
from llmhost.naming import ab_unit_name, unit_name
from llmhost.proofs.base import (
    Log,
    ProofFailed,
    Shell,
    no_shell,
    remove_command,
    write_text_command,
)
from llmhost.proofs.correct import CorrectnessCheck, CorrectnessRecord
from llmhost.switch.plan import ServingRecord, SwitchPlan
from llmhost.switch.stages import NEXT, ROLL_BACK_FROM, Stage, first_stage, where


class SwitchFailed(ProofFailed):
    """The switch failed; the message says what failed and what the rollback did."""


@dataclass(frozen=True)
class RollbackTarget:
    """The model a switch leaves: how to reach it again and prove it answers right."""

    model: str
    endpoint: Endpoint
    load_timeout_s: int
    check: CorrectnessCheck | None  # None: the profile has no correctness probe
    # Where the guest records a passing probe of this unit's run (the next converge then
    # does not probe the rolled-back server again); None: not kept.
    record: CorrectnessRecord | None = None


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
    shell: Shell = field(default=no_shell, repr=False)
    log: Log = field(default=print, repr=False)
    # Each side's files that go with it, its gate record for node exporter: the source's
    # when the switch commits (kept until then: a rollback serves it again with its record),
    # the target's when the switch rolls back.
    source_leftovers: tuple[str, ...] = ()
    target_leftovers: tuple[str, ...] = ()
    stage: Stage = Stage.STAGING
    stage_started: float = field(default_factory=time.time)
    stopped_at: float | None = None
    last_answer: float | None = None
    first_answer: float | None = None
    verdicts: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.stage = first_stage(self.plan.switching and self.plan.resumed)

    def enter(self, stage: Stage) -> None:
        """Move to `stage`; out of order is a bug in the caller, not a state to carry on in."""
        if stage not in NEXT[self.stage]:
            raise RuntimeError(f"switch stage {self.stage.value} cannot go to {stage.value}")
        self.stage = stage

    def armed(self) -> bool:
        """The old model no longer serves: a failure now must bring it back."""
        return self.plan.switching and self.stage in ROLL_BACK_FROM

    def answered(self) -> None:
        """The new model's first answer: the switch's downtime ends here."""
        if self.first_answer is None and self.stage == Stage.LOADING:
            self.first_answer = time.time()
            self.enter(Stage.ANSWERS)

    def downtime_s(self) -> float | None:
        if self.first_answer is None or self.last_answer is None:
            return None
        return round(self.first_answer - self.last_answer, 1)

    def on_interrupt(self) -> str | None:
        """What Ctrl-C prints about this switch (interrupt.describe_state_with)."""
        if self.armed() or self.stage in (Stage.ROLLING_BACK, Stage.COMMITTED):
            return f"{self.host_name}: {self.where()}"
        if self.plan.switching and self.stage == Stage.STAGING:
            return f"{self.host_name}: switch to {self.plan.target} interrupted while staging: " + (
                f"{self.plan.source} still serves"
            )
        return None

    def where(self) -> str:
        """Exactly where an interrupted switch left the guest, and how to go on."""
        source, target = self.plan.source, self.plan.target
        old, new = unit_name(str(source)), self.target_unit
        return (
            f"switch {source} -> {target} interrupted: {where(self.stage, old, new, str(source))} "
            f"(files and weights of both kept). Rerun the same command to finish the switch "
            f"(it rolls back to {source} if {target} fails its proofs), or `systemctl enable "
            f"--now {old}` on the guest to serve {source} again"
        )

    def stop_old(self) -> None:
        """Stop the old model: its last answer timed, the record "pending" first (a run that
        dies in between is finished by the next one), the unit stopped and disabled, the
        GPUs verified free. Raises ProofFailed (the caller's guard rolls back)."""
        source = self.plan.source
        assert source is not None
        self.stopped_at = time.time()
        if self.source is not None:
            answered = last_answer(self.source)
            if answered is None:
                self.log(
                    f"{source} gave no answer within {LAST_ANSWER_WITHIN_S:g} s (busy with "
                    "requests in flight, or down): the downtime counts from its stop"
                )
            self.last_answer = answered or self.stopped_at
        self.log(f"switch {source} -> {self.plan.target}: staged; stopping {unit_name(source)}")
        self.enter(Stage.STOPPING)
        ok, stdout, stderr = self.shell(stop_command(self))
        if not ok:
            raise ProofFailed(
                f"stopping {unit_name(source)} or freeing the GPUs failed: {tail(stdout, stderr)}"
            )
        self.enter(Stage.STOPPED)

    def start_new(self, unit: str) -> None:
        """Enable and start the new model's unit; raises ProofFailed when systemd refuses."""
        self.enter(Stage.STARTING)
        ok, stdout, stderr = self.shell(f"systemctl enable --now {shlex.quote(unit)}")
        if not ok:
            raise ProofFailed(f"{unit} did not start: {tail(stdout, stderr)}")
        self.enter(Stage.LOADING)

    def commit(self) -> None:
        """The new model passed its proofs: record it as the one serving."""
        self.enter(Stage.COMMITTED)
        command = record_command(self.record_path, self.plan.committed)
        if self.source_leftovers:  # the record is what counts: a removal never fails it
            command += f" && {{ {remove_command(self.source_leftovers)} || true; }}"
        ok, _, stderr = self.shell(command)
        if not ok:
            raise ProofFailed(
                f"{self.plan.target} passed its proofs and serves, but {self.record_path} "
                f"was not written: {stderr.strip()}; the next run writes it"
            )

    def roll_back(self, failure: BaseException) -> None:
        """Stop the new unit, free the GPUs, serve the previous model again; always raises."""
        why = str(failure).strip() or type(failure).__name__
        source = self.source
        assert source is not None
        self.log(
            f"ROLLBACK: {self.plan.target} failed ({why.splitlines()[0]}); back to {source.model}"
        )
        self.enter(Stage.ROLLING_BACK)
        try:
            with interruptible(f"the rollback to {source.model}"):
                waited, lines = self._serve_source_again(source)
        except Interrupted:
            raise
        except Exception as exc:
            raise SwitchFailed(
                f"switch {source.model} -> {self.plan.target} FAILED: {why}\n"
                f"ROLLBACK FAILED TOO: {exc}\n{self.where()}"
            ) from None
        self.write_record(self.plan.rolled_back(why, time.time()))
        if self.target_leftovers:  # best effort, as the record: the rollback is what counts
            self.shell(f"{remove_command(self.target_leftovers)} || true")
        self.enter(Stage.ROLLED_BACK)
        raise SwitchFailed(
            f"switch {source.model} -> {self.plan.target} FAILED: {why}\n"
            f"ROLLED BACK: {source.model} serves again ({unit_name(source.model)}: ready after "
            f"{waited:.0f}s{lines}); {self.plan.target}'s unit is stopped and disabled"
        ) from None

    def _serve_source_again(self, source: RollbackTarget) -> tuple[float, str]:
        q = shlex.quote
        # In its own session: the rollback completes even if this run's ssh session dies.
        # The target's draft A/B reference too: a draft that failed its A/B leaves it
        # serving (the same model without its draft) until here, not a stopped guest.
        nodraft = ab_unit_name(self.plan.target)
        script = (
            f"systemctl disable --now {q(self.target_unit)}; systemctl stop {q(nodraft)}; "
            f"{self.gpu_free} && "
            f"systemctl enable --now {q(unit_name(source.model))}"
        )
        ok, _, stderr = self.shell(f"setsid -w sh -c {q(script)} </dev/null")
        if not ok:
            tail = "\n".join(stderr.splitlines()[-10:])
            raise ProofFailed(f"could not start {unit_name(source.model)}: {tail}")
        result = source.endpoint.wait_ready(source.load_timeout_s, log=self.log, interval_s=1.0)
        if not result.ready:
            raise ProofFailed(
                f"{unit_name(source.model)} not ready at stage {result.stage}: {result.detail}"
            )
        if source.check is None:
            return result.waited_s, ", no correctness probe"
        lines = source.check.run().text()
        if source.record is not None:
            source.record.write()
        return result.waited_s, f", correctness OK: {lines}"

    def write_record(self, record: ServingRecord) -> None:
        """The rollback's record (best effort: the rollback's outcome is what counts)."""
        ok, _, stderr = self.shell(record_command(self.record_path, record))
        if not ok:
            self.log(f"could not write {self.record_path}: {stderr.strip()}")

    def summary(self) -> dict[str, Any]:
        staging = (self.stopped_at or time.time()) - self.stage_started
        return {
            "host": self.host_name,
            "from": self.plan.source,
            "to": self.plan.target,
            "staging_s": round(staging, 1),
            "downtime_s": self.downtime_s(),
            "gate": self.verdicts.get("gate", "not run"),
            "resumed": self.plan.resumed,
            "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        }


def tail(stdout: str, stderr: str) -> str:
    return " ".join((stderr.strip() or stdout.strip()).splitlines()[-5:])


def record_command(path: str, record: ServingRecord) -> str:
    """Write the guest's serving record atomically (a temp file, then rename): the one
    writer of serving.json."""
    return write_text_command(path, record.dump())


def stop_command(guard: SwitchGuard) -> str:
    """Record "pending", stop and disable the old unit, verify the GPUs are free."""
    plan = guard.plan
    assert plan.source is not None
    pending = record_command(guard.record_path, plan.pending_record(time.time()))
    old = shlex.quote(unit_name(plan.source))
    return f"{pending} && systemctl disable --now {old} && {guard.gpu_free}"


# How long the old model may take to answer its last probe. A server busy with long streams
# can queue a new request behind them (12 s on the sandbox), and the switch must not wait for
# that: the stop drains the streams in flight anyway (the unit's KillSignal).
LAST_ANSWER_WITHIN_S = 3.0


def last_answer(source: RollbackTarget) -> float | None:
    """The old model's last answer (readiness's probe: a one-token completion) just before it
    stops: downtime starts here. None when it gives none within LAST_ANSWER_WITHIN_S (the
    downtime then counts from the stop)."""
    answered = source.endpoint.probe(LAST_ANSWER_WITHIN_S, answer_within=LAST_ANSWER_WITHIN_S)
    return time.time() if answered.ready else None


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
