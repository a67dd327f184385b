"""Host and guest data must agree: one site-wide check before any operation.

Each host's group_data is validated on its own (llmhost/config/loading.py), so a Proxmox host
and the guests it runs can each be valid and still contradict each other: a VM asked to serve
on 8 GPUs under an lxc-p2p host, whose nvidia driver owns those GPUs, fails only at its serve
step, late. Here every serving guest with GPUs is matched to the Proxmox host whose
`lxc_guests` / `kvm_guests` names it, and every contradiction is refused at once, one line
each, naming the guest and the host and saying what is allowed.

A guest's entry matches the serving guest named by its `inventory_name`, or else the one
named exactly like it, or else the one whose first DNS label is its `name` ("llm-lxc" matches
"llm-lxc.lab.example"). The whole inventory is searched, every Proxmox host's entries alike, so
an entry whose label matches several guests ("llm-lxc.site-a.example" and
"llm-lxc.site-b.example") is refused as ambiguous until its `inventory_name` picks one, and a
guest that entries of two Proxmox hosts match is refused naming both. An entry with no
inventory host behind it is not judged, nor a guest without GPUs (the sandbox).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from typing import Any

from pyinfra.context import ContextObject

from llmhost.config.guest import GuestConfig
from llmhost.config.loading import ConfigError, load_guest, load_proxmox_host
from llmhost.config.proxmox_host import GuestRef, KvmGuestRef, LxcGuestRef, ProxmoxHostConfig
from llmhost.groups import is_proxmox_host, is_serving_guest

HEADER = "Proxmox host and guest data disagree:"


def _first_label(name: str) -> str | None:
    """The first DNS label, "llm-lxc" of "llm-lxc.lab.example"; None for an IP address."""
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return name.split(".", 1)[0]
    return None


def matching_guests(ref: GuestRef, names: Iterable[str]) -> list[str]:
    """The inventory names a host's guest entry stands for (module docstring: in that order)."""
    names = list(names)
    if ref.inventory_name is not None:
        return [n for n in names if n == ref.inventory_name]
    if ref.name in names:
        return [ref.name]
    return [n for n in names if _first_label(n) == ref.name]


def _names(names: list[str]) -> str:
    """'a' and 'b'; 'a', 'b' and 'c'."""
    quoted = [repr(n) for n in names]
    return " and ".join([", ".join(quoted[:-1]), quoted[-1]] if len(quoted) > 1 else quoted)


def _all(names: list[str]) -> str:
    return "both" if len(names) == 2 else "all"


def _pci(address: str) -> str:
    """One spelling of a PCI address: "c1:00.0" is "0000:c1:00.0" (domain 0)."""
    return address if address.count(":") == 2 else f"0000:{address}"


def _lxc_conflicts(
    host_name: str, host: ProxmoxHostConfig, name: str, ref: LxcGuestRef, guest: GuestConfig
) -> list[str]:
    where = f"LXC guest {name!r} (vmid {ref.vmid} of Proxmox host {host_name!r})"
    if host.host_profile == "kvm-vfio":
        return [
            f"{where} has gpu_count {guest.gpu_count}, but {host_name!r} is kvm-vfio: its GPUs "
            "are bound to vfio-pci and pass only to VMs (kvm_guests' pci_addresses); serve "
            "from a KVM guest, or make the host lxc-p2p"
        ]
    if guest.host_profile != host.host_profile:
        return [_profile_conflict(where, guest, host_name, host)]
    return []


def _kvm_conflicts(
    host_name: str, host: ProxmoxHostConfig, name: str, ref: KvmGuestRef, guest: GuestConfig
) -> list[str]:
    where = f"KVM guest {name!r} (vmid {ref.vmid} of Proxmox host {host_name!r})"
    if host.host_profile == "lxc-p2p":
        return [
            f"{where} has gpu_count {guest.gpu_count}, but {host_name!r} is lxc-p2p: its "
            "nvidia driver owns the GPUs and shares them only with LXC guests; give the VM its "
            "GPUs from a kvm-vfio host (its pci_addresses), or serve from an LXC guest"
        ]
    problems = []
    if guest.host_profile != host.host_profile:
        problems.append(_profile_conflict(where, guest, host_name, host))
    if guest.gpu_count != len(ref.pci_addresses):
        problems.append(
            f"{where} has gpu_count {guest.gpu_count}, but its kvm_guests entry on "
            f"{host_name!r} passes {len(ref.pci_addresses)} pci_addresses: a VM has the GPUs "
            "passed to it, so the two must be equal"
        )
    return problems


def _profile_conflict(
    where: str, guest: GuestConfig, host_name: str, host: ProxmoxHostConfig
) -> str:
    return (
        f"{where} has host_profile {guest.host_profile!r}, but {host_name!r} is "
        f"{host.host_profile!r}: a guest's host_profile must be its host's"
    )


def _too_many(
    host_name: str, host: ProxmoxHostConfig, kind: str, name: str, guest: GuestConfig
) -> list[str]:
    if host.gpu_count is None or guest.gpu_count <= host.gpu_count:
        return []
    return [
        f"{kind} guest {name!r} has gpu_count {guest.gpu_count}, but its Proxmox host "
        f"{host_name!r} has {host.gpu_count} GPUs (its gpu_count): at most {host.gpu_count}"
    ]


def _shared_pci(host_name: str, host: ProxmoxHostConfig, shown: dict[int, str]) -> list[str]:
    """VMs of one host listing one GPU, and more GPUs passed than the host has."""
    holders: dict[str, list[str]] = {}
    for vm in host.kvm_guests:
        for address in dict.fromkeys(_pci(a) for a in vm.pci_addresses):
            holders.setdefault(address, []).append(shown[vm.vmid])
    problems = [
        f"KVM guests {_names(held)} of Proxmox host {host_name!r} {_all(held)} list "
        f"{address}: a GPU passes to one VM; give each its own pci_addresses"
        for address, held in holders.items()
        if len(held) > 1
    ]
    vms = [shown[vm.vmid] for vm in host.kvm_guests if vm.pci_addresses]
    # One VM's own count is judged against its gpu_count (and that against the host's).
    if host.gpu_count is not None and len(vms) > 1 and len(holders) > host.gpu_count:
        problems.append(
            f"KVM guests {_names(vms)} of Proxmox host {host_name!r} are passed "
            f"{len(holders)} GPUs, but it has {host.gpu_count} (its gpu_count)"
        )
    return problems


def resolve_entries(
    proxmox: dict[str, ProxmoxHostConfig], guests: dict[str, GuestConfig]
) -> tuple[dict[str, dict[int, str]], list[str]]:
    """{Proxmox host: {vmid: its guest's inventory name}} of the entries that stand for one
    guest of `guests`, no other host's entry matching it; and the refusals of the rest: an
    entry matching several guests by label, a guest matched by entries of two hosts."""
    found: dict[str, dict[int, str]] = {host_name: {} for host_name in proxmox}
    claims: dict[str, dict[str, list[int]]] = {}  # guest -> {host: vmids of its entries}
    problems: list[str] = []
    for host_name, host in proxmox.items():
        for kind, refs in (("LXC", host.lxc_guests), ("KVM", host.kvm_guests)):
            for ref in refs:
                names = matching_guests(ref, guests)
                if len(names) > 1:
                    problems.append(
                        f"{kind} guest entry {ref.name!r} (vmid {ref.vmid}) of Proxmox host "
                        f"{host_name!r} matches {_names(names)} by first DNS label: set its "
                        "inventory_name to the guest it stands for"
                    )
                elif names:
                    found[host_name][ref.vmid] = names[0]
                    claims.setdefault(names[0], {}).setdefault(host_name, []).append(ref.vmid)
    for name, hosts in claims.items():
        if len(hosts) > 1:
            entries = [f"{h!r} (vmid {', '.join(map(str, v))})" for h, v in hosts.items()]
            problems.append(
                f"guest {name!r} is claimed by entries of Proxmox hosts "
                f"{' and '.join([', '.join(entries[:-1]), entries[-1]])}: a guest runs on one "
                "host; tie each entry to its own guest with inventory_name, or remove the wrong one"
            )
            for h in hosts:  # not judged against either host until it is one host's
                found[h] = {v: n for v, n in found[h].items() if n != name}
    return found, problems


def host_conflicts(
    host_name: str, host: ProxmoxHostConfig, guests: dict[str, GuestConfig], found: dict[int, str]
) -> list[str]:
    """Every contradiction between one Proxmox host and its guests: `found` is its entries'
    inventory names by vmid (resolve_entries), `guests` their data."""
    with_gpus = {vmid: n for vmid, n in found.items() if guests[n].gpu_count > 0}
    shown = {ref.vmid: ref.name for ref in (*host.lxc_guests, *host.kvm_guests)}
    problems: list[str] = []
    lxc_with_gpus: list[str] = []
    for ref in host.lxc_guests:
        if (name := with_gpus.get(ref.vmid)) is not None:
            guest = guests[name]
            lxc_with_gpus.append(name)
            problems += _lxc_conflicts(host_name, host, name, ref, guest)
            problems += _too_many(host_name, host, "LXC", name, guest)
    for ref in host.kvm_guests:
        if (name := with_gpus.get(ref.vmid)) is not None:
            shown[ref.vmid] = name
            guest = guests[name]
            problems += _kvm_conflicts(host_name, host, name, ref, guest)
            problems += _too_many(host_name, host, "KVM", name, guest)
    if host.host_profile == "lxc-p2p" and len(lxc_with_gpus) > 1:
        problems.append(
            f"LXC guests {_names(lxc_with_gpus)} of Proxmox host {host_name!r} "
            f"{_all(lxc_with_gpus)} have GPUs: under lxc-p2p every LXC guest gets all of the "
            "host's /dev/nvidia* nodes, so one LXC guest of a host may have gpu_count > 0 "
            "(give the others 0, or move them to another host)"
        )
    if host.host_profile == "kvm-vfio":
        problems += _shared_pci(host_name, host, shown)
    return problems


def check_site(proxmox: dict[str, ProxmoxHostConfig], guests: dict[str, GuestConfig]) -> None:
    """ConfigError listing every contradiction, one a line; keys are inventory names."""
    found, problems = resolve_entries(proxmox, guests)
    problems += [
        line
        for host_name, host in proxmox.items()
        for line in host_conflicts(host_name, host, guests, found[host_name])
    ]
    if problems:
        raise ConfigError("\n".join([HEADER, *(f"  {line}" for line in problems)]))


def load_site(
    inventory: Any,
) -> tuple[dict[str, ProxmoxHostConfig], dict[str, GuestConfig]]:
    """Every Proxmox host's and serving guest's data that validates. A host whose own data
    does not is left out: its own loading refuses it, naming the field."""
    proxmox: dict[str, ProxmoxHostConfig] = {}
    guests: dict[str, GuestConfig] = {}
    for host in inventory:
        try:
            if is_proxmox_host(host):
                proxmox[host.name] = load_proxmox_host(host)
            elif is_serving_guest(host):
                guests[host.name] = load_guest(host)
        except ConfigError:
            continue
    return proxmox, guests


# Inventory id -> (the inventory, kept so that its id is not reused; the refusal or None).
_CHECKED: dict[int, tuple[Any, str | None]] = {}


def check_inventory(inventory: Any) -> None:
    """check_site on a pyinfra inventory (or pyinfra's `inventory` context object). Every host
    runs the deploy file: the site is judged once, and each host raises the same message."""
    real = inventory._get_module() if isinstance(inventory, ContextObject) else inventory
    key = id(real)
    if key not in _CHECKED:
        try:
            check_site(*load_site(real))
        except ConfigError as exc:
            _CHECKED[key] = (real, str(exc))
        else:
            _CHECKED[key] = (real, None)
    refusal = _CHECKED[key][1]
    if refusal is not None:
        raise ConfigError(refusal)
