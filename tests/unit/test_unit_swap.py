"""The draft A/B's unit swap gives the serving unit back on every path, failures included."""

from __future__ import annotations

import pytest
from pyinfra.api import OperationError

from llmhost.operations import verify


@pytest.fixture
def guest(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    commands: list[str] = []
    monkeypatch.setattr(verify, "say", lambda message: None)
    monkeypatch.setattr(verify, "guest_run", lambda c: (commands.append(c), (True, "", ""))[1])
    return commands


def test_the_main_unit_is_started_again_after_the_measurement(guest: list[str]) -> None:
    waited: list[str] = []
    with verify.UnitSwap("main.service", "ab.service", waited.append):
        pass
    # In its own session on the guest: it completes even when a Ctrl-C ends the run.
    assert guest[-1] == (
        "setsid -w sh -c 'systemctl stop ab.service; systemctl start main.service' </dev/null"
    )
    assert waited == ["ab.service", "main.service"]


def test_a_reference_unit_that_never_gets_ready_still_gives_the_main_unit_back(
    guest: list[str],
) -> None:
    def wait(unit: str) -> None:
        if unit == "ab.service":
            raise OperationError("A/B: ab.service not ready")

    with (
        pytest.raises(OperationError, match="not ready"),
        verify.UnitSwap("main.service", "ab.service", wait),
    ):
        pytest.fail("the measurement must not run")
    # In its own session on the guest: it completes even when a Ctrl-C ends the run.
    assert guest[-1] == (
        "setsid -w sh -c 'systemctl stop ab.service; systemctl start main.service' </dev/null"
    )
