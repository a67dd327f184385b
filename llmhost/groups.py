"""Which deploy acts on which host: the inventory's groups are the site's roles.

Every deploy takes the whole site's inventory and acts only on the hosts of its role; the
others are left alone with one line saying so, and their data is not validated by it.
"""

from __future__ import annotations

from typing import Any

from pyinfra import logger

PROXMOX_HOSTS = "proxmox_hosts"
# Serving guests: LXC containers and KVM VMs on the Proxmox hosts, or the local sandbox guest.
SERVING_GUEST_GROUPS = ("lxc_guests", "kvm_guests", "sandbox")
# Prometheus and Alertmanager: a role a host may hold beside its other one (by default the
# Proxmox host: up whenever the site is, and it reaches every guest).
MONITORING = "monitoring"
# vllm-router in front of the serving guests (a role beside another, like monitoring).
ROUTERS = "routers"


class RoleError(ValueError):
    """A host in two roles: each deploy would act on it twice, differently."""


def is_proxmox_host(host: Any) -> bool:
    return PROXMOX_HOSTS in host.groups


def is_serving_guest(host: Any) -> bool:
    return any(group in host.groups for group in SERVING_GUEST_GROUPS)


def is_monitoring_host(host: Any) -> bool:
    return MONITORING in host.groups


def is_router_host(host: Any) -> bool:
    return ROUTERS in host.groups


def site_is_monitored(inventory: Any) -> bool:
    """The inventory has a monitoring host: every Proxmox host and guest gets node exporter."""
    return any(is_monitoring_host(h) for h in inventory)


def scrape_address(host: Any) -> str:
    """Where the site reaches a host: pyinfra's own address for it."""
    return str(host.data.get("ssh_hostname") or host.name)


def check_one_role(host: Any) -> None:
    if is_proxmox_host(host) and is_serving_guest(host):
        guest_groups = [g for g in SERVING_GUEST_GROUPS if g in host.groups]
        raise RoleError(
            f"host {host.name!r} is in {PROXMOX_HOSTS} and in {', '.join(guest_groups)}: "
            "a Proxmox host does not serve models itself; list it in one group"
        )


def leave_alone(host: Any, deploy: str, role: str) -> None:
    """The one line a deploy prints for a host that is not of its role."""
    groups = ", ".join(sorted(g for g in host.groups if g != "all")) or "no group"
    logger.info(f"{host.print_prefix}{deploy}: not a {role} ({groups}), left alone")
