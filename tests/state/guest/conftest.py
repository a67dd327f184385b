"""testinfra: does the guest still look as deployed? Expectations come from group_data.

pytest tests/state/guest --hosts=ssh://10.99.0.12 --ssh-config=.sandbox/ssh_config
LLMHOST_INVENTORY=inventory/lab.py pytest tests/state/guest --hosts=ssh://llm-lxc.lab.example
"""

from __future__ import annotations

import os

import pytest

from llmhost.config.guest import GuestConfig
from llmhost.config.loading import load_guest
from llmhost.inventory import get_host


@pytest.fixture(scope="module")
def cfg(host) -> GuestConfig:  # noqa: ANN001 - testinfra's host fixture
    inventory = os.environ.get("LLMHOST_INVENTORY", "inventory/sandbox.py")
    return load_guest(get_host(inventory, host.backend.get_hostname()))
