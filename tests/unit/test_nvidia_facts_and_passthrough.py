"""Host facts on the H200 captures, and the LXC passthrough block they produce (rendered, not
applied: no Proxmox here)."""

from __future__ import annotations

import pytest

from llmhost.facts.nvidia import parse_driver_version, parse_proc_devices
from llmhost.lxc_passthrough import passthrough_block
from tests.helpers import H200


def test_proc_devices_gives_the_dynamic_uvm_major() -> None:
    majors = parse_proc_devices((H200 / "proc-devices.txt").read_text().splitlines())
    assert majors["nvidia"] == 195
    assert majors["nvidia-uvm"] == 238
    assert majors["nvidia-caps"] == 241
    assert "virtblk" not in majors and "loop" not in majors  # block devices are not chars


def test_driver_version_from_proc() -> None:
    text = (H200 / "proc-driver-nvidia-version.txt").read_text()
    assert parse_driver_version(text) == "580.159.04"


def test_passthrough_block_for_the_h200_capture_is_not_executed_on_proxmox() -> None:
    majors = parse_proc_devices((H200 / "proc-devices.txt").read_text().splitlines())
    nodes = [
        "/dev/nvidia0",
        "/dev/nvidiactl",
        "/dev/nvidia-uvm",
        "/dev/nvidia-uvm-tools",
        "/dev/nvidia-caps/",
    ]
    block = passthrough_block(majors, nodes)
    assert block.splitlines() == [
        "# BEGIN llmhost gpu passthrough",
        "lxc.cgroup2.devices.allow: c 195:* rwm",
        "lxc.cgroup2.devices.allow: c 238:* rwm",
        "lxc.cgroup2.devices.allow: c 241:* rwm",
        "lxc.mount.entry: /dev/nvidia0 dev/nvidia0 none bind,optional,create=file",
        "lxc.mount.entry: /dev/nvidiactl dev/nvidiactl none bind,optional,create=file",
        "lxc.mount.entry: /dev/nvidia-uvm dev/nvidia-uvm none bind,optional,create=file",
        "lxc.mount.entry: /dev/nvidia-uvm-tools dev/nvidia-uvm-tools none bind,optional,"
        "create=file",
        "lxc.mount.entry: /dev/nvidia-caps/ dev/nvidia-caps/ none bind,optional,create=dir",
        "# END llmhost gpu passthrough",
    ]


def test_passthrough_refuses_a_host_without_the_nvidia_module() -> None:
    with pytest.raises(ValueError, match="lacks nvidia, nvidia-uvm"):
        passthrough_block({"mem": 1}, [])
