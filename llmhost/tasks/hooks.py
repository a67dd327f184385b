"""Post-deploy proof: the unit serves (readiness) before the deploy may call itself done."""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import deploy

from llmhost.config import GuestConfig
from llmhost.operations.serving import ready
from llmhost.render import unit_name


def probe_address(cfg: GuestConfig) -> str:
    """Where the control machine reaches the guest's port."""
    return str(host.data.get("ssh_hostname") or host.name)


@deploy("post-deploy hooks")
def hooks(cfg: GuestConfig) -> None:
    for model, port in cfg.units_and_ports():
        profile = cfg.profile_for(model)
        ready(
            name=f"readiness of {unit_name(model)}",
            unit=unit_name(model),
            base_url=f"http://{probe_address(cfg)}:{port}",
            served_name=str(profile.served_name),
            timeout_s=profile.load_timeout_s,
        )
