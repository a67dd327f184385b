"""make test's preparation survives a guest stopped under it (llmhost/testbed/suite_start.py).

Table-driven on the step's retry rule, with the guests' start replaced by a counter: the
real restart is exercised by every `make test` (and by hand: `lxc-stop -k` during
`llmhost sandbox test-start` brings the guest back)."""

from __future__ import annotations

import pytest

from llmhost.testbed import sandbox, suite_start


@pytest.mark.parametrize(
    ("failures", "succeeds", "brought_back"),
    [
        (0, True, 0),  # nothing stopped: one try, nothing restarted
        (1, True, 1),  # stopped once: the guests back, the step again
        (2, True, 2),
        (3, False, 2),  # stopped every time: an error naming the step, not an endless loop
    ],
)
def test_step_retries_after_bringing_the_guests_back(
    monkeypatch: pytest.MonkeyPatch, failures: int, succeeds: bool, brought_back: int
) -> None:
    calls = {"action": 0, "bring_back": 0}

    def action() -> None:
        calls["action"] += 1
        if calls["action"] <= failures:
            raise sandbox.SandboxError(
                "ssh: connect to host 10.99.0.12 port 22: Connection refused"
            )

    def bring_back() -> list[str]:
        calls["bring_back"] += 1
        return [sandbox.CONTAINER]

    monkeypatch.setattr(suite_start, "bring_back", bring_back)
    monkeypatch.setattr(sandbox, "log", lambda _msg: None)
    if succeeds:
        suite_start.step("forgetting a failed switch", action)
    else:
        with pytest.raises(sandbox.SandboxError, match="forgetting a failed switch.*tried 3"):
            suite_start.step("forgetting a failed switch", action)
    assert calls["bring_back"] == brought_back
    assert calls["action"] == min(failures + 1, suite_start.ATTEMPTS)


def test_forget_refuses_a_stopped_guest_instead_of_skipping_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The user's `forget-failed` skips a stopped guest; the suite's start must not."""
    monkeypatch.setattr(sandbox, "container_running", lambda name=sandbox.CONTAINER: False)
    with pytest.raises(sandbox.SandboxError, match="not running"):
        suite_start.forget_failed()
