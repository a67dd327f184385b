"""One naming rule for what llmhost keeps on a guest per model: its serving unit, the draft
A/B's reference unit, and back from a unit name to its model. Strings only, importing
nothing: the renderers, the switch engine and the proofs share it (the engines must not
import pyinfra), and a rename is made here once.
"""

from __future__ import annotations

PREFIX = "llmhost-"
AB_SUFFIX = "-nodraft"
# The serving units' service user's home: its caches (vLLM's, torch's) live under it.
SERVICE_HOME = "/var/lib/llmhost"


def unit_name(model: str) -> str:
    """The systemd unit that serves `model`."""
    return f"{PREFIX}{model}.service"


def ab_unit_name(model: str) -> str:
    """The same server without its draft: started only by the draft gate, never enabled."""
    return f"{PREFIX}{model}{AB_SUFFIX}.service"


def units_of(model: str) -> set[str]:
    """A model's serving unit and its draft A/B reference unit (which may not exist)."""
    return {unit_name(model), ab_unit_name(model)}


def model_of_unit(unit: str) -> str | None:
    """The model a serving unit serves; None for A/B reference units and foreign names."""
    if not (unit.startswith(PREFIX) and unit.endswith(".service")):
        return None
    model = unit.removeprefix(PREFIX).removesuffix(".service")
    return None if model.endswith(AB_SUFFIX) or not model else model
