"""The draft A/B: the same model served without its draft, the same sweep, compared with
the gate's sweep. A draft that does not pay fails: it costs memory and a second model.

The swap stops the serving unit and starts its no-draft twin; the serving unit runs again
afterwards, also after a failure or Ctrl-C. One exception: in a switch whose draft has just
failed its A/B for good, the twin keeps serving (the same model, without its draft) until
the rollback stops it and starts the model before (switch/guard.py): the draft's unit is
not loaded again only to be stopped (on the reference box, a 30-minute load refused).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from llmhost.bench import gates
from llmhost.bench.gates import ABLine
from llmhost.interrupt import interruptible
from llmhost.proofs.base import Log, ProofFailed, Shell
from llmhost.proofs.gate import BenchOutcome, waiting
from llmhost.proofs.sweep import BenchRun, run_sweep


@dataclass
class UnitSwap:
    """Serve from another unit for a while; the main unit is running again afterwards."""

    main: str
    other: str
    wait: Callable[[str], None]
    shell: Shell
    log: Log = print
    # False: on a clean exit the other unit keeps serving and the main one stays stopped (a
    # switch about to roll back, which stops both); an exception gives the main unit back.
    give_back: bool = True

    def __enter__(self) -> UnitSwap:
        self.give_back = True
        self.log(f"A/B: stopping {self.main}, starting {self.other} (same model, no draft)")
        ok, _, err = self.shell(f"systemctl stop {self.main} && systemctl start {self.other}")
        try:
            if not ok:
                raise ProofFailed(f"A/B: could not start {self.other}: {err}")
            self.wait(self.other)
        except BaseException:
            # __exit__ does not run when __enter__ fails: give the main unit back here.
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, exc_type: object = None, *exc: object) -> None:
        if exc_type is None and not self.give_back:
            self.log(
                f"A/B: {self.other} keeps serving and {self.main} stays stopped until the "
                "switch rolls back"
            )
            return
        self.log(f"A/B: stopping {self.other}, starting {self.main} again")
        # In its own session on the guest: the swap back completes even when this run is
        # interrupted (Ctrl-C) and its ssh session goes away half-way.
        ok, _, err = self.shell(
            f"setsid -w sh -c 'systemctl stop {self.other}; systemctl start {self.main}' </dev/null"
        )
        if not ok:
            raise ProofFailed(f"A/B: could not give {self.main} back: {err}")
        self.wait(self.main)


def ready_waiter(run: BenchRun, load_timeout_s: int) -> Callable[[str], None]:
    """What the A/B's unit swap waits on: the unit it started answers, or the A/B fails."""

    def wait(unit: str) -> None:
        result = run.endpoint.wait_ready(load_timeout_s, log=run.log)
        if not result.ready:
            raise ProofFailed(f"A/B: {unit} not ready: {result.stage}: {result.detail}")

    return wait


def compare(
    run: BenchRun,
    outcome: BenchOutcome,
    unit: str,
    ab_unit: str,
    tolerance: float,
    timeout_s: int,
    rolls_back: Callable[[], bool] = lambda: False,
) -> None:
    """Swap to the no-draft unit, sweep, swap back; the verdict (and a failure when the draft
    does not pay) goes into `outcome`, the no-draft sweep into the results directory.

    A pair beyond the noise allowance is measured once more (`bench.confirm`, after
    `confirm_after_s`): both sweeps again, and each level keeps the better ratio. A draft
    that does not pay loses both times; load on the box during one sweep of a pair, once.
    `rolls_back`: whether a failure now rolls a switch back; then a final failing verdict
    leaves the no-draft twin serving until the rollback, instead of loading the draft again.
    """
    wait = ready_waiter(run, timeout_s)
    swap = UnitSwap(unit, ab_unit, wait, run.shell, run.log)
    with interruptible(f"the draft A/B of {run.model}"), swap:
        without = run_sweep(run)
        ab_lines: list[ABLine] = gates.draft_ab(outcome.results, without, run.levels, tolerance)
        if not run.bench.confirm and not all(a.ok for a in ab_lines) and rolls_back():
            swap.give_back = False
    if run.bench.confirm and not all(a.ok for a in ab_lines):
        ab_lines = confirm_pair(run, swap, ab_lines, tolerance, outcome, rolls_back)
    for ab in ab_lines:
        run.log(f"draft A/B {run.model} {ab.text()}")
    outcome.verdicts["draft_ab"] = [vars(a) | {"ok": a.ok, "ratio": a.ratio} for a in ab_lines]
    run.save("without-draft", without, {"reference_for": "draft_ab"})
    if not all(a.ok for a in ab_lines):
        outcome.failures.append(
            f"the draft of {run.model} does not pay:\n  "
            + "\n  ".join(a.text() for a in ab_lines if not a.ok)
        )


def confirm_pair(
    run: BenchRun,
    swap: UnitSwap,
    first: list[ABLine],
    tolerance: float,
    outcome: BenchOutcome,
    rolls_back: Callable[[], bool],
) -> list[ABLine]:
    """The A/B's pair measured again after a pause, the draft first and the reference last
    (so that a switch rolling back need not load the draft again); per level, the better
    ratio of the two pairs. The first pair's lines go into the verdicts as well."""
    low = ",".join(str(a.concurrency) for a in first if not a.ok)
    pause = run.bench.confirm_after_s
    run.log(
        f"draft A/B {run.model} beyond its noise allowance at c={low}: measuring the pair once "
        f"more to confirm, in {pause} s (a draft that does not pay loses both times; load on "
        "the box during one sweep, once)"
    )
    for ab in first:
        run.log(f"draft A/B {run.model} (first pair) {ab.text()}")
    with interruptible(f"the draft A/B of {run.model}"):
        waiting(run, "the confirming pair", run.bench)
        with_draft = run_sweep(run)
        with swap:
            without = run_sweep(run)
            again = gates.draft_ab(with_draft, without, run.levels, tolerance)
            final = [max(a, b, key=lambda x: x.ratio) for a, b in zip(first, again, strict=True)]
            if not all(a.ok for a in final) and rolls_back():
                swap.give_back = False
    outcome.verdicts["draft_ab_first_pair"] = [vars(a) | {"ratio": a.ratio} for a in first]
    return final
