"""The rolling switch: one replica at a time out of the router, drained, switched, proven, back.

Why one at a time and these rules (issue 22): a fleet on fixed GPUs has no spare set to surge
into, so the others carry the load while one replica loads its new model.
- The last healthy worker is never removed: with no other replica in rotation and serving, the
  roll refuses before touching anything (a router with no worker answers 503 to everyone).
- A replica goes back into rotation only when it serves (/health and a real completion), on
  the new model, or on the old one its own switch rolled back to.
- A replica that fails its switch stops the roll there: the replicas not reached are left as
  they are, and the report names it.
- Ctrl-C leaves the replica in hand out of rotation and says so; the next roll first adds back
  every replica that serves but is not listed, then goes on where it stopped (a replica
  already on the target is passed over).
The steps on a replica (its drain, its single-box switch, its readiness) are handed in, so the
engine runs against fakes in unit tests and against the sandbox fleet in the site command.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from llmhost.fleet.drain import Drained
from llmhost.fleet.router_api import RouterControl, RouterError, same_url
from llmhost.interrupt import Interrupted


@dataclass(frozen=True)
class Replica:
    name: str  # the inventory name
    worker_url: str  # as the router lists it (http://<guest>:<port>)


@dataclass(frozen=True)
class ReplicaSteps:
    """What the roll can do with one replica (the site command wires these to its guest)."""

    on_target: Callable[[Replica], bool]  # serves the target model already
    serves: Callable[[Replica], bool]  # /health and a real completion answer now
    drain: Callable[[Replica], Drained]  # in-flight requests finished, or the bound passed
    # The single-box switch with its staging, proofs and rollback; raises when it failed
    # (after rolling the replica back to its previous model).
    switch: Callable[[Replica], None]


@dataclass
class ReplicaResult:
    name: str
    outcome: str = "not reached"  # already on target | switched | failed | out of rotation
    out_s: float = 0.0  # time out of the router's rotation
    detail: str = ""

    def text(self) -> str:
        out = f", {self.out_s:.0f} s out of rotation" if self.out_s else ""
        return f"{self.name}: {self.outcome}{out}" + (f" ({self.detail})" if self.detail else "")


@dataclass
class RollReport:
    results: list[ReplicaResult]
    seconds: float = 0.0
    stopped: str = ""  # why the roll stopped early; "" when every replica was done

    @property
    def availability(self) -> float:
        """Replica-seconds in rotation over replica-seconds of the roll (1.0: none was out)."""
        total = self.seconds * len(self.results)
        return 1.0 - sum(r.out_s for r in self.results) / total if total else 1.0

    def text(self) -> str:
        lines = [r.text() for r in self.results]
        lines.append(
            f"roll {'stopped' if self.stopped else 'done'} in {self.seconds:.0f} s; "
            f"fleet availability {self.availability:.1%} (replica-time in rotation)"
        )
        return "\n".join(lines + ([self.stopped] if self.stopped else []))


class RollStopped(Exception):  # noqa: N818 - reads as what happened
    """The roll stopped before its end; `report` says where each replica stands."""

    def __init__(self, report: RollReport) -> None:
        super().__init__(report.stopped)
        self.report = report


@dataclass
class Roll:
    """One rolling switch over `replicas`, in their order."""

    replicas: Sequence[Replica]
    router: RouterControl
    steps: ReplicaSteps
    add_timeout_s: float = 120.0  # the router polls /health before it lists a worker again
    log: Callable[[str], None] = print
    clock: Callable[[], float] = time.monotonic
    results: dict[str, ReplicaResult] = field(default_factory=dict)

    def run(self) -> RollReport:
        """Every replica onto the target; RollStopped (with the report) at the first that
        cannot be, Interrupted or KeyboardInterrupt on Ctrl-C after saying who is out."""
        start = self.clock()
        self.results = {r.name: ReplicaResult(r.name) for r in self.replicas}
        report = RollReport(list(self.results.values()))
        try:
            self.add_back_the_left_out()
            for replica in self.replicas:
                self.one(replica)
        except RollStopped as stop:
            stop.report.seconds = self.clock() - start
            raise
        report.seconds = self.clock() - start
        return report

    def add_back_the_left_out(self) -> None:
        """A replica that serves but is not listed (an earlier roll interrupted) goes back."""
        listed = self.router.workers()
        for replica in self.replicas:
            if same_url(replica.worker_url) not in listed and self.steps.serves(replica):
                self.log(
                    f"{replica.name}: serves but is out of rotation (an earlier roll "
                    "stopped): added back first"
                )
                self.router.add(replica.worker_url, self.add_timeout_s)

    def one(self, replica: Replica) -> None:
        result = self.results[replica.name]
        if self.steps.on_target(replica):
            result.outcome = "already on target"
            return
        self.refuse_the_last_worker(replica)
        out_at = self.clock()
        failure: Exception | None = None
        try:
            # A removal the router refuses changed nothing known: its RouterError says so.
            self.router.remove(replica.worker_url)
            self.log(f"{replica.name}: out of rotation")
            try:
                self.steps_on(replica)
            except (Interrupted, KeyboardInterrupt):
                raise
            except Exception as exc:  # noqa: BLE001 - the switch says why; the roll stops
                failure = exc
            if not self.steps.serves(replica):
                self.left_out(
                    replica,
                    out_at,
                    failure or "it does not serve after its switch",
                    f"{replica.name} does not serve and stays out of rotation",
                )
            self.router.add(replica.worker_url, self.add_timeout_s)
        except (Interrupted, KeyboardInterrupt):
            result.outcome, result.out_s = "out of rotation", self.clock() - out_at
            self.log(
                f"interrupted: {replica.name} is out of the router's rotation; the others "
                "serve. Run the site command again: it adds back a replica that serves and "
                "finishes the roll"
            )
            raise
        except RollStopped:
            raise
        except RouterError as exc:
            if same_url(replica.worker_url) in self.router_workers_or_none():
                raise  # still in rotation (a refused removal): the router's error says why
            self.left_out(replica, out_at, failure or exc)
        except Exception as exc:  # noqa: BLE001 - a step that broke: say where the replica is
            self.left_out(replica, out_at, failure or exc)
        result.out_s = self.clock() - out_at
        self.log(f"{replica.name}: back in rotation after {result.out_s:.0f} s")
        if failure is not None:
            result.outcome, result.detail = "failed", str(failure)
            self.stop(
                f"{replica.name} failed its switch ({result.detail}) and is back in rotation, "
                "serving; the roll stops here"
            )
        result.outcome = "switched"

    def steps_on(self, replica: Replica) -> None:
        """Out of rotation: drained (or its bound passed), then its single-box switch."""
        drained = self.steps.drain(replica)
        left = "an unknown number of" if drained.left is None else str(drained.left)
        self.log(
            f"{replica.name}: drained in {drained.waited_s:.0f} s"
            if drained.empty
            else f"{replica.name}: {left} request(s) still in flight after "
            f"{drained.waited_s:.0f} s; vLLM's own drain on stop lets them finish"
        )
        self.steps.switch(replica)

    def left_out(
        self, replica: Replica, out_at: float, why: object, stopped: str | None = None
    ) -> None:
        """The roll stops with this replica out of rotation: `why` in its result, `stopped`
        (or the replica and why) as the reason the roll stopped."""
        result = self.results[replica.name]
        result.outcome, result.out_s = "out of rotation", self.clock() - out_at
        result.detail = str(why) or repr(why)
        self.stop(stopped or f"{replica.name} is out of rotation: {result.detail}")

    def router_workers_or_none(self) -> set[str]:
        """The router's list, or nothing when it does not answer either."""
        try:
            return self.router.workers()
        except RouterError:
            return set()

    def refuse_the_last_worker(self, replica: Replica) -> None:
        listed = self.router.workers()
        others = [
            r
            for r in self.replicas
            if r is not replica and same_url(r.worker_url) in listed and self.steps.serves(r)
        ]
        if not others:
            self.stop(
                f"{replica.name} is the last healthy worker in rotation: it is never removed "
                "(bring another replica back, or switch it as a single box)"
            )

    def stop(self, why: str) -> None:
        untouched = [r.name for r in self.results.values() if r.outcome == "not reached"]
        if untouched:
            why += f"; not reached, left as they are: {', '.join(untouched)}"
        raise RollStopped(RollReport(list(self.results.values()), stopped=why))
