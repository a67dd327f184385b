"""Load an inventory file with its group_data outside a pyinfra run (tests, report, bench)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pyinfra.api import Config, Inventory, State
from pyinfra.context import ctx_state
from pyinfra_cli.inventory import make_inventory


def load_inventory(path: str, override_data: dict[str, Any] | None = None) -> Inventory:
    """As `pyinfra <path>` run from the project root (inventory/ and group_data/ side by side)."""
    project = Path(path).resolve().parent.parent
    with ctx_state.use(State(Inventory(([], {})), Config())):
        return make_inventory(path, override_data=override_data or {}, cwd=str(project))


def get_host(path: str, host_name: str, override_data: dict[str, Any] | None = None) -> Any:
    return load_inventory(path, override_data).get_host(host_name)
