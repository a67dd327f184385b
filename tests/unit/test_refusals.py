"""A host's live state refuses that host alone: the checks read facts and say why, nothing
raises while pyinfra prepares, and the run's last lines name each refused host.

No target: facts in (a fake host), the refusal (or none) out, table-driven as pyinfra tests
its operations. The sandbox proves the whole path (tests/integration/test_site_sandbox.py).
"""

from __future__ import annotations

import json
import runpy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from pyinfra.context import ctx_host

from llmhost.config.guest import GuestConfig
from llmhost.config.loading import validate
from llmhost.facts.files import FileText, FreeBytes
from llmhost.facts.nvidia import HostDriverVersion
from llmhost.facts.ports import PortHolder, PortHolders
from llmhost.operations import refused
from llmhost.tasks.serving_guest import live_state_refusal
from tests.helpers import REPO, lab_guest

GB = 1_000_000_000
FOREIGN = PortHolder(4242, "foreign-vllm.service", "python3 -m http.server 8000")
OURS = PortHolder(777, "llmhost-tiny-llama.service", "vllm serve")
FAILED = json.dumps(
    {
        "current": "tiny-llama-alt",
        "failed": {"model": "tiny-llama", "at": 1796600000, "why": "correctness: wrong"},
    }
)


@dataclass
class Guest:
    """A serving guest as its preflight reads it."""

    holders: list[PortHolder] = field(default_factory=list)
    free: int | None = 100 * GB
    driver: str | None = "590.48.01"
    name: str = "guest1"
    print_prefix: str = "[guest1] "

    def get_fact(self, fact: type, **kwargs: Any) -> Any:
        if fact is PortHolders:
            return self.holders
        if fact is FreeBytes:
            return self.free
        if fact is HostDriverVersion:
            return self.driver
        if fact is FileText:
            return None  # no weights staged yet: all of them count against the disk
        raise KeyError(fact)


def sandbox_guest(**override: Any) -> GuestConfig:
    values = runpy.run_path(str(REPO / "group_data" / "sandbox.py"))
    data = {k: v for k, v in values.items() if not k.startswith("_")}
    return validate(GuestConfig, "guest1", {**data, **override})


@pytest.mark.parametrize(
    ("guest", "record", "override", "why"),
    [
        (Guest(), None, {}, None),
        (Guest(holders=[OURS]), None, {}, None),  # llmhost's own unit holds it: fine
        (Guest(holders=[FOREIGN]), None, {}, "port 8000 (for tiny-llama) is already held by"),
        (Guest(free=GB // 100), None, {}, "has 0.01 GB free, staging needs 1 GB"),
        (Guest(), FAILED, {}, "tiny-llama failed its proofs at"),
        (Guest(), FAILED, {"retry_failed_switch": True}, None),
        # Several at once: the first a user fixes is said (the port before the disk).
        (Guest(holders=[FOREIGN], free=0), FAILED, {}, "is already held by"),
    ],
)
def test_the_guest_s_live_state_refuses_it_with_why(
    guest: Guest, record: str | None, override: dict, why: str | None
) -> None:
    with ctx_host.use(guest):
        said = live_state_refusal(sandbox_guest(**override), record)
    if why is None:
        assert said is None
    else:
        assert said is not None and why in said, said
        assert "nothing was changed" in said


def test_weights_already_on_the_box_take_no_room_and_are_not_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full models disk refuses no guest whose every weights set is on the box already
    (existing_weights: linked, staged nowhere)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "m.json").write_text(
        json.dumps({"model": "tiny-llama", "files": {"model.safetensors": {"size": 4}}})
    )
    local = {"tiny-llama": {"path": "/srv/local-weights/tiny-llama", "manifest": "m.json"}}
    with ctx_host.use(Guest(free=0)):
        assert live_state_refusal(sandbox_guest(existing_weights=local), None) is None
    with ctx_host.use(Guest(free=0)):  # the same guest staging them: refused for the disk
        assert "staging needs" in (live_state_refusal(sandbox_guest(), None) or "")


@pytest.mark.parametrize(
    ("driver", "why"),
    [("590.48.01", None), ("580.159.04", "580.159.04"), (None, "no NVIDIA kernel module")],
)
def test_an_lxc_guest_is_refused_for_a_host_driver_other_than_the_pin(
    driver: str | None, why: str | None
) -> None:
    with ctx_host.use(Guest(driver=driver, free=10**15)):  # Kimi's 547 GB fit
        said = live_state_refusal(lab_guest(), None)
    assert (said is None) == (why is None)
    if why:
        assert why in said and "590.48.01" in said, said


def test_a_refused_host_gets_one_operation_said_now_and_in_the_last_lines(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    added: list[dict] = []
    warned: list[str] = []
    registered: list[Any] = []
    monkeypatch.setattr(refused, "REFUSED", [])
    monkeypatch.setattr(refused, "host_refused", lambda **kw: added.append(kw))
    monkeypatch.setattr(refused.logger, "warning", warned.append)
    monkeypatch.setattr(refused.atexit, "register", registered.append)
    with ctx_host.use(Guest()):
        refused.refuse_host("the guest's live state", "port 8000 is held\nsecond line")
    assert added == [{"name": "refused: the guest's live state", "message": added[0]["message"]}]
    assert warned == ["[guest1] REFUSED (the guest's live state): port 8000 is held\nsecond line"]
    assert len(registered) == 1  # the summary at exit, once however many hosts
    assert refused.summary_lines(refused.REFUSED) == [
        "--> 1 host(s) refused, nothing changed on them:",
        "    guest1: port 8000 is held",
    ]
    assert refused.summary_lines([]) == []
