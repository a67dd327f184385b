"""A Proxmox host's data and its serving guests' must agree: each contradiction is refused
before any operation, naming the guest and the host (llmhost/config/site.py)."""

from __future__ import annotations

import ast
import re
import textwrap
from pathlib import Path
from typing import Any

import pytest
from pyinfra import inventory as pyinfra_inventory
from pyinfra.context import ctx_inventory

from llmhost.config import site
from llmhost.config.guest import GuestConfig
from llmhost.config.loading import ConfigError, host_data, validate
from llmhost.config.proxmox_host import ProxmoxHostConfig
from llmhost.config.site import HEADER, check_inventory, check_site, matching_guests
from llmhost.inventory import get_host, load_inventory

REPO = Path(__file__).resolve().parents[2]
LAB = str(REPO / "inventory" / "lab.py")
PVE, LXC, LXC2, VM, VM2 = (
    "pve1.lab.example",
    "llm-lxc.lab.example",
    "llm-lxc-2.lab.example",
    "llm-vm.lab.example",
    "llm-vm-2.lab.example",
)

# The lab's own data (group_data/ through the real loader), so the cases below differ from
# the reference box only in what they name.
PVE_DATA: dict[str, Any] = host_data(get_host(LAB, PVE))
LXC_DATA: dict[str, Any] = host_data(get_host(LAB, LXC))
KVM_DATA: dict[str, Any] = {**LXC_DATA, "host_profile": "kvm-vfio"}  # group_data/kvm_guests.py
SANDBOX_DATA: dict[str, Any] = {
    "host_profile": "sandbox",
    "accelerator": "cpu",
    "catalogs": ("testbed",),
    "served_model": "tiny-llama",
    "vllm": {"version": "0.32.0", "python": "system"},
}


def pci(first: int, count: int = 8) -> list[str]:
    return [f"0000:{bus:02x}:00.0" for bus in range(first, first + count)]


LXC_201 = {"vmid": 201, "name": "llm-lxc"}
LXC_202 = {"vmid": 202, "name": "llm-lxc-2"}
VM_301 = {"vmid": 301, "name": "llm-vm", "pci_addresses": pci(0xC1)}
VM_302 = {"vmid": 302, "name": "llm-vm-2", "pci_addresses": pci(0x41)}
VFIO = {"host_profile": "kvm-vfio", "lxc_guests": [], "kvm_guests": [VM_301]}


def host(**changes: Any) -> dict[str, ProxmoxHostConfig]:
    return {PVE: validate(ProxmoxHostConfig, PVE, {**PVE_DATA, **changes})}


# Two sites in one inventory, each box listing its guest as the lab does ("llm-lxc", vmid 201).
PVE_A, PVE_B = "pve1.site-a.example", "pve1.site-b.example"
LXC_A, LXC_B = "llm-lxc.site-a.example", "llm-lxc.site-b.example"


def two_boxes(a: dict[str, Any], b: dict[str, Any]) -> dict[str, ProxmoxHostConfig]:
    return {
        name: validate(ProxmoxHostConfig, name, {**PVE_DATA, **changes})
        for name, changes in ((PVE_A, a), (PVE_B, b))
    }


def lab_guests(*names: str, **changes: Any) -> dict[str, GuestConfig]:
    return {n: validate(GuestConfig, n, {**LXC_DATA, **changes}) for n in names}


def vm_guests(*names: str, **changes: Any) -> dict[str, GuestConfig]:
    return {n: validate(GuestConfig, n, {**KVM_DATA, **changes}) for n in names}


REFUSED = [
    # (id, Proxmox hosts, guests, fragments of one line; every line names guest and host)
    (
        "KVM guest with GPUs on an lxc-p2p host",
        host(kvm_guests=[{"vmid": 301, "name": "llm-vm"}]),
        vm_guests(VM),
        [f"KVM guest {VM!r} (vmid 301", f"{PVE!r} is lxc-p2p", "nvidia driver owns the GPUs"],
    ),
    (
        "KVM guest with the lxc-p2p profile on an lxc-p2p host",
        host(kvm_guests=[{"vmid": 301, "name": "llm-vm"}]),
        lab_guests(VM),
        [f"KVM guest {VM!r}", f"{PVE!r} is lxc-p2p", "from a kvm-vfio host"],
    ),
    (
        "LXC guest with GPUs on a kvm-vfio host",
        host(**{**VFIO, "lxc_guests": [LXC_201], "kvm_guests": []}),
        lab_guests(LXC, host_profile="kvm-vfio"),
        [f"LXC guest {LXC!r} (vmid 201", f"{PVE!r} is kvm-vfio", "bound to vfio-pci"],
    ),
    (
        "LXC guest whose host_profile is not its host's",
        host(),
        lab_guests(LXC, host_profile="kvm-vfio"),
        [f"LXC guest {LXC!r}", "host_profile 'kvm-vfio'", f"{PVE!r} is 'lxc-p2p'", "its host's"],
    ),
    (
        "KVM guest whose host_profile is not its host's",
        host(**VFIO),
        vm_guests(VM, host_profile="lxc-p2p"),
        [f"KVM guest {VM!r}", "host_profile 'lxc-p2p'", f"{PVE!r} is 'kvm-vfio'"],
    ),
    (
        "two LXC guests with GPUs on one lxc-p2p host",
        host(lxc_guests=[LXC_201, LXC_202]),
        lab_guests(LXC, LXC2),
        [f"LXC guests {LXC!r} and {LXC2!r} of Proxmox host {PVE!r}", "/dev/nvidia*"],
    ),
    (
        "two VMs listing one GPU (one address written without its domain)",
        host(
            **{
                **VFIO,
                "gpu_count": 16,
                "kvm_guests": [VM_301, {**VM_302, "pci_addresses": [*pci(0x41, 7), "c1:00.0"]}],
            }
        ),
        vm_guests(VM, VM2),
        [f"KVM guests {VM!r} and {VM2!r} of Proxmox host {PVE!r} both list 0000:c1:00.0"],
    ),
    (
        "more GPUs than the host has (LXC)",
        host(gpu_count=4),
        lab_guests(LXC),
        [f"LXC guest {LXC!r} has gpu_count 8", f"Proxmox host {PVE!r} has 4 GPUs"],
    ),
    (
        "more GPUs than the host has (KVM)",
        host(**{**VFIO, "gpu_count": 4}),
        vm_guests(VM),
        [f"KVM guest {VM!r} has gpu_count 8", f"Proxmox host {PVE!r} has 4 GPUs"],
    ),
    (
        "VMs passed more GPUs than the host has",
        host(**{**VFIO, "kvm_guests": [VM_301, VM_302]}),
        vm_guests(VM, VM2),
        [f"KVM guests {VM!r} and {VM2!r} of Proxmox host {PVE!r} are passed 16 GPUs", "has 8"],
    ),
    (
        "a VM's gpu_count is not its number of PCI addresses",
        host(**{**VFIO, "kvm_guests": [{**VM_301, "pci_addresses": pci(0xC1, 2)}]}),
        vm_guests(VM),
        [f"KVM guest {VM!r} (vmid 301 of Proxmox host {PVE!r}) has gpu_count 8", "passes 2"],
    ),
    (
        "an entry tied to its guest by inventory_name",
        host(kvm_guests=[{"vmid": 301, "name": "gpu-vm", "inventory_name": "10.0.0.12"}]),
        vm_guests("10.0.0.12"),
        ["KVM guest '10.0.0.12' (vmid 301", f"{PVE!r} is lxc-p2p"],
    ),
]


@pytest.mark.parametrize(
    ("proxmox", "served", "expected"),
    [case[1:] for case in REFUSED],
    ids=[case[0] for case in REFUSED],
)
def test_a_contradiction_is_refused_naming_guest_and_host(
    proxmox: dict[str, ProxmoxHostConfig], served: dict[str, GuestConfig], expected: list[str]
) -> None:
    with pytest.raises(ConfigError) as err:
        check_site(proxmox, served)
    header, *lines = str(err.value).splitlines()
    assert header == HEADER
    assert any(all(part in line for part in expected) for line in lines), str(err.value)
    for line in lines:  # each line names a guest and the host
        assert PVE in line and any(name in line for name in served), line


SITE_REFUSED = [
    # (id, Proxmox hosts, guests, fragments of each line, in order)
    (
        "two boxes, one label: each box's entry is ambiguous",
        two_boxes({}, {}),
        lab_guests(LXC_A, LXC_B),
        [
            [
                f"entry 'llm-lxc' (vmid 201) of Proxmox host {PVE_A!r} matches {LXC_A!r} and "
                f"{LXC_B!r}",
                "inventory_name",
            ],
            [f"entry 'llm-lxc' (vmid 201) of Proxmox host {PVE_B!r} matches", "inventory_name"],
        ],
    ),
    (
        "two boxes, inventory_name on one: the other's entry is still ambiguous",
        two_boxes({"lxc_guests": [{**LXC_201, "inventory_name": LXC_A}]}, {}),
        lab_guests(LXC_A, LXC_B),
        [[f"Proxmox host {PVE_B!r} matches {LXC_A!r} and {LXC_B!r}", "inventory_name"]],
    ),
    (
        "a label that a guest without GPUs shares is still ambiguous",
        two_boxes({}, {"lxc_guests": [{**LXC_201, "inventory_name": LXC_B}]}),
        {**lab_guests(LXC_A), LXC_B: validate(GuestConfig, LXC_B, SANDBOX_DATA)},
        [[f"Proxmox host {PVE_A!r} matches {LXC_A!r} and {LXC_B!r}"]],
    ),
    (
        "one guest claimed by two boxes",
        two_boxes({}, {}),
        lab_guests(LXC_A),
        [[f"guest {LXC_A!r} is claimed", f"{PVE_A!r} (vmid 201) and {PVE_B!r} (vmid 201)"]],
    ),
    (
        "one guest claimed by two boxes, one through inventory_name",
        two_boxes({}, {"lxc_guests": [{**LXC_201, "inventory_name": LXC_A}]}),
        lab_guests(LXC_A),
        [[f"guest {LXC_A!r} is claimed", f"{PVE_A!r} (vmid 201) and {PVE_B!r}"]],
    ),
]


@pytest.mark.parametrize(
    ("proxmox", "served", "expected"),
    [case[1:] for case in SITE_REFUSED],
    ids=[case[0] for case in SITE_REFUSED],
)
def test_an_entry_that_is_not_one_guests_of_one_host_is_refused(
    proxmox: dict[str, ProxmoxHostConfig],
    served: dict[str, GuestConfig],
    expected: list[list[str]],
) -> None:
    """Only that line: the guests are not judged against a host they may not be on."""
    with pytest.raises(ConfigError) as err:
        check_site(proxmox, served)
    header, *lines = str(err.value).splitlines()
    assert header == HEADER and len(lines) == len(expected), str(err.value)
    for line, parts in zip(lines, expected, strict=True):
        assert all(part in line for part in parts), line


def test_every_contradiction_is_listed_one_line_each() -> None:
    proxmox = host(gpu_count=4, lxc_guests=[LXC_201, LXC_202])
    with pytest.raises(ConfigError) as err:
        check_site(proxmox, lab_guests(LXC, LXC2))
    lines = str(err.value).splitlines()[1:]
    assert len(lines) == 3, lines  # each guest asks for 8 of 4 GPUs, and they collide
    assert all(line.startswith("  ") for line in lines)


ACCEPTED = [
    ("the reference box: one LXC guest on all 8 GPUs", host(), lab_guests(LXC)),
    ("the VM variant: kvm-vfio, 8 PCI addresses", host(**VFIO), vm_guests(VM)),
    (
        "two VMs, each its own 8 GPUs of 16",
        host(**{**VFIO, "gpu_count": 16, "kvm_guests": [VM_301, VM_302]}),
        vm_guests(VM, VM2),
    ),
    ("the host's GPU count unknown", host(gpu_count=None), lab_guests(LXC)),
    ("a GPU guest no Proxmox host lists", host(), lab_guests(LXC, "llm-other.lab.example")),
    (
        "the sandbox's stand-in: a VM entry with no PCI address and no inventory host behind it",
        host(kvm_guests=[{"vmid": 301, "name": "llm-vm", "pci_addresses": []}]),
        {"10.99.0.12": validate(GuestConfig, "10.99.0.12", SANDBOX_DATA)},
    ),
    (
        "a guest without GPUs where GPUs could not go",
        host(kvm_guests=[{"vmid": 301, "name": "llm-vm"}]),
        {VM: validate(GuestConfig, VM, SANDBOX_DATA)},
    ),
    (
        "an LXC guest with GPUs beside one without",
        host(lxc_guests=[LXC_201, LXC_202]),
        {**lab_guests(LXC), LXC2: validate(GuestConfig, LXC2, SANDBOX_DATA)},
    ),
    (
        "inventory_name elsewhere: the label match no longer applies",
        host(kvm_guests=[{"vmid": 301, "name": "llm-vm", "inventory_name": "vm.other"}]),
        vm_guests(VM),
    ),
    (
        "two boxes, one label, each entry tied to its own guest by inventory_name",
        two_boxes(
            {"lxc_guests": [{**LXC_201, "inventory_name": LXC_A}]},
            {"lxc_guests": [{**LXC_201, "inventory_name": LXC_B}]},
        ),
        lab_guests(LXC_A, LXC_B),
    ),
]


@pytest.mark.parametrize(
    ("proxmox", "served"), [case[1:] for case in ACCEPTED], ids=[case[0] for case in ACCEPTED]
)
def test_agreeing_data_is_accepted(
    proxmox: dict[str, ProxmoxHostConfig], served: dict[str, GuestConfig]
) -> None:
    check_site(proxmox, served)


@pytest.mark.parametrize(
    ("ref", "names", "expected"),
    [
        ({"name": "llm-lxc"}, ["llm-lxc.lab.example", "llm-lxc-2.lab.example"], [LXC]),
        ({"name": "llm-lxc"}, ["llm-lxc", "llm-lxc.lab.example"], ["llm-lxc"]),  # exact first
        ({"name": "10"}, ["10.0.0.12"], []),  # an IP address has no DNS label
        ({"name": "llm-lxc"}, [LXC_A, LXC_B], [LXC_A, LXC_B]),  # ambiguous: check_site refuses
        ({"name": "x", "inventory_name": "10.0.0.12"}, ["10.0.0.12", "x"], ["10.0.0.12"]),
    ],
)
def test_an_entry_matches_its_inventory_host(
    ref: dict[str, Any], names: list[str], expected: list[str]
) -> None:
    cfg = validate(ProxmoxHostConfig, PVE, {**PVE_DATA, "lxc_guests": [{"vmid": 201, **ref}]})
    assert matching_guests(cfg.lxc_guests[0], names) == expected


# --- through the real loader ------------------------------------------------------------------


def site_file(tmp_path: Path, text: str) -> str:
    """An inventory file beside the repo's group_data/, as a copied lab.py would be."""
    (tmp_path / "inventory").mkdir()
    (tmp_path / "group_data").symlink_to(REPO / "group_data")
    path = tmp_path / "inventory" / "site.py"
    path.write_text(text)
    return str(path)


# inventory/lab.py before the site check: a VM on 8 GPUs under the lxc-p2p host.
OLD_LAB = """
proxmox_hosts = [
    ("pve1.lab.example", {"ssh_user": "root", "kvm_guests": [{"vmid": 301, "name": "llm-vm"}]}),
]
lxc_guests = [("llm-lxc.lab.example", {"ssh_user": "root"})]
kvm_guests = [("llm-vm.lab.example", {"ssh_user": "root"})]
"""


def test_the_lab_inventory_loads_cleanly() -> None:
    inv = load_inventory(LAB)
    check_inventory(inv)
    assert [h.name for h in inv] == [PVE, LXC]
    pve = validate(ProxmoxHostConfig, PVE, host_data(inv.get_host(PVE)))
    assert pve.host_profile == "lxc-p2p" and pve.gpu_count == 8 and not pve.kvm_guests
    assert validate(GuestConfig, LXC, host_data(inv.get_host(LXC))).gpu_count == 8


def test_the_old_contradictory_lab_is_refused_naming_both(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    inv = load_inventory(site_file(tmp_path, OLD_LAB))
    loads: list[Any] = []
    load_site = site.load_site

    def counted(inventory: Any) -> Any:
        loads.append(inventory)
        return load_site(inventory)

    monkeypatch.setattr(site, "load_site", counted)
    with pytest.raises(ConfigError) as first:
        check_inventory(inv)
    lines = str(first.value).splitlines()
    assert lines[0] == HEADER and len(lines) == 2
    assert f"KVM guest {VM!r}" in lines[1] and f"{PVE!r} is lxc-p2p" in lines[1]
    with pytest.raises(ConfigError):  # every host of the run is refused; the site judged once
        check_inventory(inv)
    assert loads == [inv]


def test_the_vm_variant_in_lab_docstring_is_accepted(tmp_path: Path) -> None:
    doc = ast.get_docstring(ast.parse(Path(LAB).read_text())) or ""
    example = re.search(r"\n\n((?:    .*\n|\n)+)", doc + "\n")
    assert example, doc
    inv = load_inventory(site_file(tmp_path, textwrap.dedent(example.group(1))))
    check_inventory(inv)
    vm = validate(ProxmoxHostConfig, PVE, host_data(inv.get_host(PVE))).kvm_guests[0]
    assert len(vm.pci_addresses) == 8 and inv.get_host(VM) is not None


def test_pyinfra_context_inventory_is_judged_per_inventory(tmp_path: Path) -> None:
    """Deploys pass pyinfra's `inventory` (one object whatever the run's inventory)."""
    with ctx_inventory.use(load_inventory(LAB)):
        check_inventory(pyinfra_inventory)
    old = load_inventory(site_file(tmp_path, OLD_LAB))
    refused = pytest.raises(ConfigError, match="KVM guest 'llm-vm.lab.example'")
    with ctx_inventory.use(old), refused:
        check_inventory(pyinfra_inventory)


def test_a_guest_whose_own_data_is_bad_is_left_to_its_own_loading(tmp_path: Path) -> None:
    """Its own deploy step refuses it, naming the field; the site check judges the rest."""
    vm = '("llm-vm.lab.example", {"ssh_user": "root"})'
    bad = OLD_LAB.replace(vm, '("llm-vm.lab.example", {"ssh_user": "root", "gpu_cont": 8})')
    assert bad != OLD_LAB
    check_inventory(load_inventory(site_file(tmp_path, bad)))
