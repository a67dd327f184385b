"""The rolling switch engine (llmhost/fleet/roll.py) against a router and replicas in memory:
one replica out at a time, the last worker never removed, a failure stops the roll, Ctrl-C
says who is out and the next roll finishes it."""

from __future__ import annotations

import pytest

from llmhost.fleet.drain import Drained
from llmhost.fleet.roll import Replica, ReplicaSteps, Roll, RollStopped
from llmhost.fleet.router_api import RouterError


class FakeRouter:
    """vllm-router's membership, with a record of who was listed while each switch ran."""

    def __init__(self, urls: list[str]) -> None:
        self.listed = set(urls)
        self.calls: list[str] = []

    def workers(self) -> set[str]:
        return set(self.listed)

    def remove(self, url: str) -> None:
        self.calls.append(f"remove {url}")
        self.listed.discard(url)

    def add(self, url: str, timeout_s: float) -> None:
        self.calls.append(f"add {url}")
        self.listed.add(url)


class Fleet:
    """Replicas serving `model`; `fail` fails that one's switch (it rolls back and serves its
    old model), `interrupt` presses Ctrl-C during that one's switch."""

    def __init__(self, names: list[str], target: str = "B") -> None:
        self.replicas = [Replica(n, f"http://{n}:8000") for n in names]
        self.model = dict.fromkeys(names, "A")
        self.up = dict.fromkeys(names, True)
        self.router = FakeRouter([r.worker_url for r in self.replicas])
        self.target, self.fail, self.interrupt = target, "", ""
        self.switched: list[str] = []
        self.listed_while_switching: list[set[str]] = []
        self.said: list[str] = []
        self.now = 0.0

    def clock(self) -> float:
        self.now += 1.0
        return self.now

    def switch(self, replica: Replica) -> None:
        self.listed_while_switching.append(self.router.workers())
        self.switched.append(replica.name)
        if replica.name == self.interrupt:
            raise KeyboardInterrupt
        if replica.name == self.fail:
            raise RuntimeError("correctness FAILED for B; rolled back to A")
        self.model[replica.name] = self.target

    def roll(self) -> Roll:
        steps = ReplicaSteps(
            on_target=lambda r: self.model[r.name] == self.target,
            serves=lambda r: self.up[r.name],
            drain=lambda r: Drained(True, 0, 2.0),
            switch=self.switch,
        )
        return Roll(self.replicas, self.router, steps, log=self.said.append, clock=self.clock)


def test_a_roll_switches_every_replica_one_at_a_time_and_keeps_the_others_in_rotation() -> None:
    fleet = Fleet(["g1", "g2", "g3"])
    report = fleet.roll().run()
    assert fleet.model == dict.fromkeys(["g1", "g2", "g3"], "B")
    assert [r.outcome for r in report.results] == ["switched"] * 3
    # While each switched, exactly the other two were in rotation.
    everyone = {r.worker_url for r in fleet.replicas}
    for replica, listed in zip(fleet.replicas, fleet.listed_while_switching, strict=True):
        assert listed == everyone - {replica.worker_url}
    assert fleet.router.listed == everyone
    assert all(r.out_s > 0 for r in report.results) and 0 < report.availability < 1
    assert "fleet availability" in report.text()


def test_a_replica_that_fails_is_back_on_its_old_model_and_the_roll_stops_there() -> None:
    fleet = Fleet(["g1", "g2", "g3"])
    fleet.fail = "g2"
    with pytest.raises(RollStopped) as stopped:
        fleet.roll().run()
    report = stopped.value.report
    assert [r.outcome for r in report.results] == ["switched", "failed", "not reached"]
    assert fleet.switched == ["g1", "g2"]  # g3 untouched
    assert fleet.model == {"g1": "B", "g2": "A", "g3": "A"}
    assert fleet.router.listed == {r.worker_url for r in fleet.replicas}  # g2 back in
    assert "g2 failed its switch" in str(stopped.value)
    assert "not reached, left as they are: g3" in str(stopped.value)
    assert "correctness FAILED" in report.results[1].detail


def test_the_last_healthy_worker_is_never_removed() -> None:
    fleet = Fleet(["g1", "g2"])
    fleet.up["g2"] = False  # g2 does not serve: g1 is all the fleet has
    with pytest.raises(RollStopped, match="g1 is the last healthy worker"):
        fleet.roll().run()
    assert fleet.router.calls == [] and fleet.switched == []


def test_a_replica_already_on_the_target_is_passed_over() -> None:
    fleet = Fleet(["g1", "g2"])
    fleet.model["g1"] = "B"
    report = fleet.roll().run()
    assert fleet.switched == ["g2"]
    assert [r.outcome for r in report.results] == ["already on target", "switched"]
    assert "remove http://g1:8000" not in fleet.router.calls


def test_ctrl_c_says_which_replica_is_out_and_the_next_roll_adds_it_back_and_finishes() -> None:
    fleet = Fleet(["g1", "g2"])
    fleet.interrupt = "g2"
    with pytest.raises(KeyboardInterrupt):
        fleet.roll().run()
    assert fleet.router.listed == {"http://g1:8000"}  # g2 out, g1 (switched) serving
    assert any("interrupted: g2 is out of the router's rotation" in s for s in fleet.said)
    fleet.interrupt = ""
    report = fleet.roll().run()
    assert any("g2: serves but is out of rotation" in s for s in fleet.said)
    assert [r.outcome for r in report.results] == ["already on target", "switched"]
    assert fleet.model == {"g1": "B", "g2": "B"}
    assert fleet.router.listed == {"http://g1:8000", "http://g2:8000"}


def test_a_replica_that_does_not_serve_after_its_switch_stays_out_and_is_named() -> None:
    fleet = Fleet(["g1", "g2"])

    def broken(replica: Replica) -> None:
        fleet.up[replica.name] = False
        raise RuntimeError("readiness: not ready after 420 s")

    roll = fleet.roll()
    roll.steps = ReplicaSteps(roll.steps.on_target, roll.steps.serves, roll.steps.drain, broken)
    with pytest.raises(RollStopped, match="g1 does not serve and stays out of rotation") as stop:
        roll.run()
    assert stop.value.report.results[0].outcome == "out of rotation"
    assert fleet.router.listed == {"http://g2:8000"}


def test_a_router_that_fails_stops_the_roll_with_its_own_message() -> None:
    fleet = Fleet(["g1", "g2"])

    def refuses(url: str) -> None:
        raise RouterError(f"router http://r:8080: /remove_worker {url} answered 500: boom")

    fleet.router.remove = refuses  # type: ignore[method-assign]
    with pytest.raises(RouterError, match="answered 500"):
        fleet.roll().run()
    assert fleet.switched == []


def test_a_replica_the_router_will_not_take_back_stops_the_roll_and_is_reported() -> None:
    fleet = Fleet(["g1", "g2"])

    def times_out(url: str, timeout_s: float) -> None:
        raise RouterError(f"router http://r:8080: /add_worker {url} failed: read timed out")

    fleet.router.add = times_out  # type: ignore[method-assign]
    with pytest.raises(RollStopped, match="g1 is out of rotation: .*read timed out") as stop:
        fleet.roll().run()
    first = stop.value.report.results[0]
    assert first.outcome == "out of rotation" and first.out_s > 0
    assert fleet.model["g1"] == "B" and fleet.router.listed == {"http://g2:8000"}
    assert "not reached, left as they are: g2" in str(stop.value)


def test_a_drain_that_could_not_count_says_so() -> None:
    fleet = Fleet(["g1", "g2"])
    roll = fleet.roll()
    roll.steps = ReplicaSteps(
        roll.steps.on_target, roll.steps.serves, lambda r: Drained(False, None, 30.0), fleet.switch
    )
    roll.run()
    assert any("an unknown number of request(s) still in flight" in s for s in fleet.said)
