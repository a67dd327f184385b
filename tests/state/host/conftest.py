"""testinfra: does the Proxmox host still look as deployed? Expectations come from group_data.

pytest tests/state/host --hosts=ssh://10.99.0.13 --ssh-config=.sandbox/ssh_config (stand-in)
LLMHOST_HOST_INVENTORY=inventory/lab.py pytest tests/state/host --hosts=ssh://pve1.lab.example
"""

from __future__ import annotations

import os

import pytest

from llmhost.config.loading import load_proxmox_host
from llmhost.config.proxmox_host import ProxmoxHostConfig
from llmhost.inventory import get_host


@pytest.fixture(scope="module")
def cfg(host) -> ProxmoxHostConfig:  # noqa: ANN001 - testinfra's host fixture
    inventory = os.environ.get("LLMHOST_HOST_INVENTORY", "inventory/sandbox.py")
    return load_proxmox_host(get_host(inventory, host.backend.get_hostname()))


@pytest.fixture(scope="module")
def in_container(host) -> bool:  # noqa: ANN001
    return host.run("systemd-detect-virt --container").stdout.strip() not in ("", "none")
