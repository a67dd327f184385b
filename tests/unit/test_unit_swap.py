"""The draft A/B's unit swap gives the serving unit back on every path, failures included."""

from __future__ import annotations

import pytest

from llmhost.proofs.base import ProofFailed
from llmhost.proofs.draft_ab import UnitSwap


@pytest.fixture
def guest() -> list[str]:
    """The commands the swap runs on the guest, in order."""
    return []


def shell(commands: list[str]):  # noqa: ANN201 - a proofs.base.Shell
    return lambda c: (commands.append(c), (True, "", ""))[1]


def test_the_main_unit_is_started_again_after_the_measurement(guest: list[str]) -> None:
    waited: list[str] = []
    with UnitSwap("main.service", "ab.service", waited.append, shell(guest)):
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
            raise ProofFailed("A/B: ab.service not ready")

    with (
        pytest.raises(ProofFailed, match="not ready"),
        UnitSwap("main.service", "ab.service", wait, shell(guest)),
    ):
        pytest.fail("the measurement must not run")
    # In its own session on the guest: it completes even when a Ctrl-C ends the run.
    assert guest[-1] == (
        "setsid -w sh -c 'systemctl stop ab.service; systemctl start main.service' </dev/null"
    )
