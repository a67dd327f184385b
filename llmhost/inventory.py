"""Load an inventory file with its group_data outside a pyinfra run (tests, report, bench)."""

from __future__ import annotations

from typing import Any

from pyinfra.api import Config, Inventory, State
from pyinfra.context import ctx_state
from pyinfra_cli.inventory import make_inventory

from llmhost.sandbox import REPO_ROOT


def load_inventory(path: str, override_data: dict[str, Any] | None = None) -> Inventory:
    with ctx_state.use(State(Inventory(([], {})), Config())):
        return make_inventory(path, override_data=override_data or {}, cwd=str(REPO_ROOT))


def get_host(path: str, host_name: str, override_data: dict[str, Any] | None = None) -> Any:
    return load_inventory(path, override_data).get_host(host_name)
