"""One naming rule for what llmhost keeps on a guest per model: its serving unit, the draft
A/B's reference unit, their unit files and env files, the proofs' records and the serving
record, and back from a unit name to its model. Strings only, importing nothing: the
renderers, the operations, the switch engine and the proofs share it (the engines must not
import pyinfra), and a rename is made here once.
"""

from __future__ import annotations

PREFIX = "llmhost-"
AB_SUFFIX = "-nodraft"
# The serving units' service user's home: its caches (vLLM's, torch's) live under it.
SERVICE_HOME = "/var/lib/llmhost"
UNIT_DIR = "/etc/systemd/system"
# Each unit's environment (mode 0600: it holds the API key), outside the unit file.
ENV_DIR = "/etc/llmhost"
SERVING_RECORD = "serving.json"


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


def unit_file(unit: str) -> str:
    """Where systemd reads `unit` (a serving unit or an A/B reference unit)."""
    return f"{UNIT_DIR}/{unit}"


def dropin_dir(unit: str) -> str:
    """The directory of `unit`'s drop-ins."""
    return f"{UNIT_DIR}/{unit}.d"


def env_file(unit: str) -> str:
    """The EnvironmentFile of `unit`: the unit's name without `.service`, then `.env`."""
    return f"{ENV_DIR}/{unit.removesuffix('.service')}.env"


def state_dir(root_dir: str) -> str:
    """Where a guest keeps llmhost's records, under its root directory."""
    return f"{root_dir}/state"


def proof_record(root_dir: str, model: str, kind: str) -> str:
    """A proof's record of `model` on the guest ("last-gate", "correct"), named by its unit."""
    return f"{state_dir(root_dir)}/{unit_name(model).removesuffix('.service')}.{kind}"


def serving_record(root_dir: str) -> str:
    """The guest's serving record: what it serves, and a switch in flight."""
    return f"{state_dir(root_dir)}/{SERVING_RECORD}"


def refcheck_cache(root_dir: str) -> str:
    """The transformers reference's verdicts kept on the guest (a no-op converge runs none)."""
    return f"{state_dir(root_dir)}/refcheck-cache"
