"""The roll's wiring to a site (llmhost/site_roll.py, llmhost/site_run.py): the caller's
--data read as pyinfra reads it, ssh as pyinfra would connect, which routers roll, when the
site command does not roll, and a failed replica run reported as the roll's stop."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from llmhost import site_roll
from llmhost.fleet.drain import Drained
from llmhost.fleet.roll import Replica
from llmhost.site_roll import (
    SwitchRunFailed,
    override_data,
    roll_steps,
    router_base_url,
    ssh_argv,
)
from llmhost.site_run import has_option, roll_first


def test_the_callers_data_is_parsed_as_pyinfra_parses_it() -> None:
    args = ["-y", "--data", "served_model=tiny-llama-alt", "--data=verify=basic"]
    args += ["--data", 'served_aliases=["chat"]', "--data", "retry_failed_switch=true"]
    assert override_data(args) == {
        "served_model": "tiny-llama-alt",
        "verify": "basic",
        "served_aliases": ["chat"],
        "retry_failed_switch": True,
    }


def test_ssh_takes_the_hosts_connection_data() -> None:
    host = SimpleNamespace(
        name="10.0.0.5",
        data={
            "ssh_user": "root",
            "ssh_key": "/k/id",
            "ssh_port": 2222,
            "ssh_strict_host_key_checking": "no",
            "ssh_known_hosts_file": "/dev/null",
        },
    )
    argv = ssh_argv(host)
    assert argv[0] == "ssh" and argv[-1] == "root@10.0.0.5"
    assert argv[argv.index("-p") : argv.index("-p") + 2] == ["-p", "2222"]
    assert "StrictHostKeyChecking=no" in argv and "UserKnownHostsFile=/dev/null" in argv
    assert "BatchMode=yes" in argv  # never a password prompt in the middle of a roll


def test_a_router_listening_everywhere_is_reached_at_its_inventory_address() -> None:
    host = SimpleNamespace(name="router1.lab", data={})
    assert router_base_url(host, "0.0.0.0", 8080) == "http://router1.lab:8080"
    assert router_base_url(host, "10.1.0.7", 8080) == "http://10.1.0.7:8080"


def test_a_replica_whose_own_run_fails_raises_for_the_roll() -> None:
    member = SimpleNamespace(replica=Replica("g2", "http://g2:8000"))
    steps = roll_steps([member], switch=lambda name: 1)  # type: ignore[list-item]
    with pytest.raises(SwitchRunFailed, match="exit 1"):
        steps.switch(Replica("g2", "http://g2:8000"))
    # Its run interrupted (exit 130): the roll stops as interrupted, the replica named out.
    interrupted = roll_steps([member], switch=lambda name: 130)  # type: ignore[list-item]
    with pytest.raises(KeyboardInterrupt):
        interrupted.switch(Replica("g2", "http://g2:8000"))
    ok = roll_steps([member], switch=lambda name: 0)  # type: ignore[list-item]
    ok.switch(Replica("g2", "http://g2:8000"))


def test_a_replica_that_does_not_listen_is_drained_at_once() -> None:
    member = site_roll.Member(
        Replica("g2", "http://127.0.0.1:9"),  # the discard port: nothing listens
        SimpleNamespace(drain_timeout_s=60),  # type: ignore[arg-type]
        [],
        None,
    )
    assert member.drain() == Drained(True, 0, 0.0)


@pytest.mark.parametrize("args", [["--limit", "g1"], ["--limit=g1"]])
def test_a_limited_run_does_not_roll(args: list[str]) -> None:
    assert has_option(args, "--limit")
    lines: list[str] = []
    # No inventory is read at all: a missing file would otherwise be reported.
    assert roll_first("/nonexistent/inventory.py", args, lines.append) == 0
    assert lines == []


def test_an_inventory_that_cannot_be_read_leaves_the_roll_to_the_site_run(tmp_path: Path) -> None:
    inventory = tmp_path / "inventory" / "broken.py"
    inventory.parent.mkdir()
    inventory.write_text("raise RuntimeError('a typo in the inventory')\n")
    lines: list[str] = []
    assert roll_first(str(inventory), ["-y"], lines.append) == 0
    assert lines and "no roll" in lines[0]


def test_the_lab_site_has_no_router_so_nothing_rolls() -> None:
    from llmhost.inventory import load_inventory

    assert site_roll.fleet_rolls(load_inventory("inventory/lab.py")) == []


class ListOnlyRouter:
    def __init__(self, urls: set[str]) -> None:
        self.listed = set(urls)

    def workers(self) -> set[str]:
        return set(self.listed)

    def add(self, url: str, timeout_s: float) -> None:
        self.listed.add(url)

    def remove(self, url: str) -> None:
        self.listed.discard(url)


def test_a_replica_an_earlier_roll_left_out_goes_back_even_when_nothing_rolls() -> None:
    members = [
        SimpleNamespace(
            replica=Replica(n, f"http://{n}:8000"),
            target="A",
            on_target=lambda: True,
            serves=lambda: True,
        )
        for n in ("g1", "g2")
    ]
    router = ListOnlyRouter({"http://g1:8000"})  # g2 was out when a roll was interrupted
    fleet = SimpleNamespace(
        router_name="r",
        router=router,
        members=members,
        add_timeout_s=5,
        behind=lambda: [m for m in members if not m.on_target()],
    )
    lines: list[str] = []
    assert site_roll.roll_fleet(fleet, switch=lambda name: 0, log=lines.append) is None  # type: ignore[arg-type]
    assert router.listed == {"http://g1:8000", "http://g2:8000"}
    assert any("g2: serves but is out of rotation" in line for line in lines), lines
