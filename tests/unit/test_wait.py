"""The one polling loop (llmhost/wait.py) on a fake clock: when it checks, when it stops."""

from __future__ import annotations

from llmhost.wait import until


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_a_check_that_holds_at_once_is_called_once_and_never_sleeps() -> None:
    clock, calls = FakeClock(), []
    got = until(lambda: calls.append(1) or "up", 10, clock=clock, sleep=clock.sleep)
    assert got == "up" and len(calls) == 1 and clock.slept == []


def test_it_polls_every_interval_until_the_check_holds() -> None:
    clock = FakeClock()
    answers = iter([None, None, "ready"])
    got = until(lambda: next(answers), 10, every_s=2, clock=clock, sleep=clock.sleep)
    assert got == "ready" and clock.slept == [2, 2]


def test_it_never_sleeps_past_the_deadline_and_checks_once_more_at_it() -> None:
    clock, seen = FakeClock(), []

    def check() -> bool:
        seen.append(clock.now)
        return False

    assert until(check, 5, every_s=2, clock=clock, sleep=clock.sleep) is False
    assert clock.slept == [2, 2, 1]  # the last sleep ends at the deadline, not 1 s after
    assert seen == [100, 102, 104, 105]  # the last check is at the deadline


def test_a_zero_timeout_still_checks_once() -> None:
    clock = FakeClock()
    assert until(lambda: 0, 0, clock=clock, sleep=clock.sleep) == 0
    assert clock.slept == []
