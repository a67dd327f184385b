"""Guests back after a Proxmox host reboot: the exact `pct`/`qm` commands decided from a
guest's config and status (tests/integration/test_host_standin.py runs them on the stand-in)."""

from __future__ import annotations

import pytest

from llmhost.config.loading import ConfigError
from llmhost.guest_boot import (
    boot_set_command,
    current_settings,
    parse_status,
    start_command,
)
from tests.helpers import lab_host

CONF = """\
arch: amd64
hostname: llm-lxc
onboot: 1
startup: order=3

[pre-upgrade]
onboot: 0
startup: order=1
"""


def test_only_the_guests_own_section_counts_not_its_snapshots() -> None:
    assert current_settings(CONF)["startup"] == "order=3"
    assert current_settings("arch: amd64\n[snap]\nonboot: 1\n").get("onboot") is None


def test_pct_set_names_only_the_keys_that_differ() -> None:
    assert boot_set_command("lxc", 201, CONF, 3) is None
    assert boot_set_command("lxc", 201, CONF, 1) == "pct set 201 --startup order=1"
    assert (
        boot_set_command("kvm", 301, "name: llm-vm\n", 2)
        == "qm set 301 --onboot 1 --startup order=2"
    )
    assert boot_set_command("lxc", 201, CONF.replace("onboot: 1", "onboot: 0"), 3) == (
        "pct set 201 --onboot 1"
    )


def test_a_stopped_guest_is_started_and_a_running_one_left_alone() -> None:
    assert parse_status("status: stopped\n") == "stopped"
    assert start_command("lxc", 201, parse_status("status: stopped")) == "pct start 201"
    assert start_command("kvm", 301, "stopped") == "qm start 301"
    assert start_command("lxc", 201, "running") is None
    assert parse_status("Configuration file 'nodes/pve/lxc/999.conf' does not exist") is None


def test_start_order_follows_the_lists_unless_given_and_opted_out_guests_are_left_alone() -> None:
    cfg = lab_host(
        lxc_guests=[{"vmid": 201, "name": "a"}, {"vmid": 202, "name": "b", "startup_order": 9}],
        kvm_guests=[
            {"vmid": 301, "name": "vm"},
            {"vmid": 302, "name": "spare", "start_at_boot": False},
        ],
    )
    assert cfg.guests_to_start() == [("lxc", 201, 1), ("kvm", 301, 3), ("lxc", 202, 9)]


def test_a_negative_startup_order_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"lxc_guests.0.startup_order"):
        lab_host(lxc_guests=[{"vmid": 201, "name": "a", "startup_order": -1}])
