"""Every bad Proxmox host datum is refused with the field named, before any operation."""

from __future__ import annotations

import pytest

from llmhost.config.loading import ConfigError, validate
from llmhost.config.proxmox_host import ProxmoxHostConfig

GOOD = {
    "host_profile": "lxc-p2p",
    "nvidia_driver_version": "590.48.01",
    "gpu_pci_ids": ["10de:2bb5"],
    "lxc_guests": [{"vmid": 201, "name": "llm-lxc"}],
}


def test_the_reference_host_data_is_accepted() -> None:
    cfg = validate(ProxmoxHostConfig, "pve1", GOOD)
    assert cfg.host_profile == "lxc-p2p" and cfg.lxc_guests[0].vmid == 201


def test_gpu_count_and_inventory_name_are_optional() -> None:
    assert validate(ProxmoxHostConfig, "pve1", GOOD).gpu_count is None  # unknown: not judged
    guest = {"vmid": 201, "name": "llm-lxc", "inventory_name": "10.0.0.11"}
    cfg = validate(ProxmoxHostConfig, "pve1", {**GOOD, "gpu_count": "8", "lxc_guests": [guest]})
    assert cfg.gpu_count == 8 and cfg.lxc_guests[0].inventory_name == "10.0.0.11"


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"host_profile": "lxc"}, ["host_profile: got 'lxc'", "'lxc-p2p' or 'kvm-vfio'"]),
        ({"kernel_params": ["iommu=off pcie_aspm=off"]}, ["kernel_params", "no spaces or quotes"]),
        ({"kernel_params": ['quiet"']}, ["kernel_params", "not a single kernel parameter"]),
        ({"kernel_params_absent": ["a b"]}, ["kernel_params_absent", "no spaces"]),
        ({"lxc_guests": [{"vmid": "two-oh-one", "name": "x"}]}, ["lxc_guests.0.vmid"]),
        ({"lxc_guests": [{"vmid": 20, "name": "x"}]}, ["lxc_guests.0.vmid", "100"]),
        ({"gpu_pci_ids": ["10de-2bb5"]}, ["gpu_pci_ids", "not a vendor:device id"]),
        ({"gpu_pci_ids": ["10DE:2BB5X"]}, ["gpu_pci_ids"]),
        (
            {"kvm_guests": [{"vmid": 301, "name": "vm", "pci_addresses": ["c1:00"]}]},
            ["kvm_guests.0.pci_addresses", "not a PCI address"],
        ),
        (
            {"kvm_guests": [{"vmid": 301, "name": "vm", "pci_addresses": ["0000:c1:00.0"]}]},
            ["kvm_guests.0.pci_addresses: under lxc-p2p"],
        ),
        ({"host_profile": "kvm-vfio", "gpu_pci_ids": []}, ["gpu_pci_ids: kvm-vfio binds"]),
        (
            {"kvm_guests": [{"vmid": 201, "name": "vm"}]},
            ["vmid 201 is both an LXC and a KVM guest"],
        ),
        ({"sysctls": {"vm swappiness": 0}}, ["sysctls", "not a sysctl key"]),
        ({"nvidia_driver_version": "latest"}, ["nvidia_driver_version"]),
        ({"boot_loader": "lilo"}, ["boot_loader: got 'lilo'"]),
        ({"allow_reboots": True}, ["allow_reboots: unknown field (did you mean 'allow_reboot'?)"]),
        ({"reboot_timeout_s": 5}, ["reboot_timeout_s", "greater than or equal to 60"]),
        ({"gpu_count": -1}, ["gpu_count", "greater than or equal to 0"]),
        ({"gpu_count": "eight"}, ["gpu_count: got 'eight'"]),
        (
            {"lxc_guests": [{"vmid": 201, "name": "llm-lxc", "inventory": "llm-lxc.lab"}]},
            ["lxc_guests.0.inventory: unknown field"],
        ),
    ],
)
def test_bad_host_data_is_refused_naming_the_field(change: dict, expected: list[str]) -> None:
    with pytest.raises(ConfigError) as err:
        validate(ProxmoxHostConfig, "pve1", {**GOOD, **change})
    message = str(err.value)
    assert message.startswith("invalid group_data for host 'pve1':")
    for part in expected:
        assert part in message, message
