"""Typed group_data of a Proxmox host: the host profile decides cmdline, modules, passthrough."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from llmhost.config.types import VERSION_RE, Reasoned, Strict

KERNEL_PARAM_RE = re.compile(r"^[A-Za-z0-9_.\-]+(=[A-Za-z0-9_.,:\-/]+)?$")
PCI_ID_RE = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{4}$")
PCI_ADDR_RE = re.compile(r"^([0-9a-f]{4}:)?[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")


class GuestRef(Strict):
    """A guest this host runs. By default it starts when the host boots and a converge starts
    it when found stopped; startup_order (Proxmox's `startup: order=`) defaults to its place
    in the lists, LXC guests first. start_at_boot false leaves its boot and run state alone.

    inventory_name ties it to its serving guest in the inventory when `name` (Proxmox's) is
    neither that host's inventory name nor its first DNS label: the site check
    (llmhost/config/site.py) judges the two together."""

    vmid: int = Field(ge=100, le=999999999)
    name: str
    inventory_name: str | None = None
    start_at_boot: bool = True
    startup_order: int | None = Field(default=None, ge=0, le=9999)


class LxcGuestRef(GuestRef):
    pass


class KvmGuestRef(GuestRef):
    pci_addresses: tuple[str, ...] = ()

    @field_validator("pci_addresses")
    @classmethod
    def _addrs(cls, values: tuple[str, ...]) -> tuple[str, ...]:
        for value in values:
            if not PCI_ADDR_RE.match(value):
                raise ValueError(f"{value!r} is not a PCI address like 0000:c1:00.0")
        return values


class ProxmoxHostConfig(Strict):
    host_name: str
    host_profile: Literal["lxc-p2p", "kvm-vfio"]
    boot_loader: Literal["auto", "systemd-boot", "grub"] = "auto"
    kernel_params: tuple[str, ...] = ()
    kernel_params_absent: tuple[str, ...] = ()
    allow_reboot: bool = False
    sysctls: dict[str, int | str] = {}
    nvidia_driver_version: Annotated[str, Field(pattern=VERSION_RE)]
    gpu_pci_ids: tuple[str, ...] = ()
    # GPUs in the box: no guest of it may ask for more (llmhost/config/site.py). None: unknown,
    # not judged. 0 is allowed (a --data gpu_count=0 meant for a guest reaches hosts too).
    gpu_count: int | None = Field(default=None, ge=0, le=64)
    lxc_guests: tuple[LxcGuestRef, ...] = ()
    kvm_guests: tuple[KvmGuestRef, ...] = ()
    # Seconds to wait for the host to come back after a reboot this deploy asked for.
    reboot_timeout_s: int = Field(default=900, ge=60)
    # For the state document (deploys/report.py): what was ruled out, and why; what binds.
    ruled_out: tuple[Reasoned, ...] = ()
    constraints: tuple[Reasoned, ...] = ()

    @field_validator("kernel_params", "kernel_params_absent")
    @classmethod
    def _params(cls, values: tuple[str, ...]) -> tuple[str, ...]:
        for value in values:
            if not KERNEL_PARAM_RE.match(value):
                raise ValueError(
                    f"{value!r} is not a single kernel parameter (no spaces or quotes): "
                    "use name or name=value"
                )
        return values

    @field_validator("gpu_pci_ids")
    @classmethod
    def _ids(cls, values: tuple[str, ...]) -> tuple[str, ...]:
        for value in values:
            if not PCI_ID_RE.match(value):
                raise ValueError(f"{value!r} is not a vendor:device id like 10de:2bb5")
        return values

    @field_validator("sysctls")
    @classmethod
    def _sysctls(cls, values: dict[str, int | str]) -> dict[str, int | str]:
        for key, value in values.items():
            if not re.match(r"^[a-z0-9_]+(\.[a-z0-9_\-]+)+$", key):
                raise ValueError(f"{key!r} is not a sysctl key like vm.swappiness")
            if re.search(r"[\s'\"]", str(value).strip()):
                raise ValueError(f"{key}: value {value!r} must not contain spaces or quotes")
        return values

    @field_validator("lxc_guests", "kvm_guests")
    @classmethod
    def _unique_vmids(cls, values: tuple) -> tuple:
        seen: set[int] = set()
        for guest in values:
            if guest.vmid in seen:
                raise ValueError(f"vmid {guest.vmid} is listed twice")
            seen.add(guest.vmid)
        return values

    def guests_to_start(self) -> list[tuple[Literal["lxc", "kvm"], int, int]]:
        """(kind, vmid, startup order) of every guest managed at boot, in start order."""
        listed: list[tuple[Literal["lxc", "kvm"], GuestRef]] = [
            *(("lxc", g) for g in self.lxc_guests),
            *(("kvm", g) for g in self.kvm_guests),
        ]
        managed = [
            (kind, g.vmid, g.startup_order if g.startup_order is not None else place)
            for place, (kind, g) in enumerate(listed, start=1)
            if g.start_at_boot
        ]
        return sorted(managed, key=lambda guest: guest[2])

    @model_validator(mode="after")
    def _profile_needs(self) -> ProxmoxHostConfig:
        if self.host_profile == "kvm-vfio" and not self.gpu_pci_ids:
            raise ValueError("gpu_pci_ids: kvm-vfio binds the GPUs to vfio-pci by id; give them")
        if self.host_profile == "lxc-p2p":
            for i, vm in enumerate(self.kvm_guests):
                if vm.pci_addresses:
                    raise ValueError(
                        f"kvm_guests.{i}.pci_addresses: under lxc-p2p the host's nvidia driver "
                        "owns the GPUs; passing them to a VM needs host_profile kvm-vfio"
                    )
        vmids = [g.vmid for g in self.lxc_guests] + [g.vmid for g in self.kvm_guests]
        dupes = sorted({v for v in vmids if vmids.count(v) > 1})
        if dupes:
            raise ValueError(f"vmid {dupes[0]} is both an LXC and a KVM guest")
        return self
