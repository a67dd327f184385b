"""The exact files deploys/host.py gives the reference box (inventory/lab.py, lxc-p2p, the
H200-captured /proc/devices and /dev/nvidia* as input), against golden files in tests/golden/host/.

LLMHOST_UPDATE_GOLDEN=1 rewrites them after a reviewed change.
"""

from __future__ import annotations

from pathlib import Path

from llmhost.config.loading import load_proxmox_host
from llmhost.config.proxmox_host import ProxmoxHostConfig
from llmhost.facts.nvidia import parse_proc_devices
from llmhost.host_plan import (
    plan,
    render_apt_pin,
    render_modprobe,
    render_modules,
    render_persistenced_unit,
    render_sysctls,
    render_udev_rule,
    systemd_boot_cmdline,
)
from llmhost.inventory import get_host
from llmhost.kernel_cmdline import edit_params, grub_params, set_grub_params
from llmhost.lxc_passthrough import passthrough_block, qm_set_commands, with_block
from llmhost.render import render_unit
from tests.unit.test_render_golden import check_golden, lab_guest

H200 = Path(__file__).resolve().parents[1] / "fixtures" / "h200"
PVE = "pve1.lab.example"
# What a fresh Proxmox VE 8 install on ZFS + UEFI writes to /etc/kernel/cmdline.
PVE_CMDLINE = "root=ZFS=rpool/ROOT/pve-1 boot=zfs quiet"
PVE_GRUB = (
    'GRUB_DEFAULT=0\nGRUB_TIMEOUT=5\nGRUB_DISTRIBUTOR="Proxmox VE"\n'
    'GRUB_CMDLINE_LINUX_DEFAULT="quiet"\nGRUB_CMDLINE_LINUX=""\n'
)


def lab_host(**override: object) -> ProxmoxHostConfig:
    return load_proxmox_host(get_host("inventory/lab.py", PVE, override_data=dict(override)))


def h200_block() -> str:
    majors = parse_proc_devices((H200 / "proc-devices.txt").read_text().splitlines())
    nodes = (H200 / "dev-nvidia-nodes.txt").read_text().split()
    return passthrough_block(majors, nodes)


def test_lxc_p2p_files_match_golden() -> None:
    cfg = lab_host()
    p = plan(cfg)
    cmdline = edit_params(PVE_CMDLINE.split(), p.kernel_params, p.kernel_params_absent)
    check_golden("host/lxc-p2p.etc-kernel-cmdline", systemd_boot_cmdline(cmdline))
    grub = set_grub_params(
        PVE_GRUB, edit_params(grub_params(PVE_GRUB) or [], p.kernel_params, p.kernel_params_absent)
    )
    check_golden("host/lxc-p2p.etc-default-grub", grub)
    check_golden("host/lxc-p2p.sysctl.conf", render_sysctls(p))
    check_golden("host/lxc-p2p.modules-load.conf", render_modules(p))
    check_golden("host/lxc-p2p.modprobe.conf", render_modprobe(p))
    check_golden("host/70-llmhost-nvidia.rules", render_udev_rule())
    check_golden("host/nvidia-persistenced.service", render_persistenced_unit())
    check_golden("host/llmhost-nvidia-driver.pref", render_apt_pin(cfg.nvidia_driver_version))


def test_lxc_guest_config_block_matches_golden() -> None:
    cfg = lab_host()
    conf = "arch: amd64\ncores: 32\nhostname: llm-lxc\nmemory: 262144\nunprivileged: 0\n"
    vmid = cfg.lxc_guests[0].vmid
    check_golden(f"host/etc-pve-lxc-{vmid}.conf", with_block(conf, h200_block()))


def test_reference_box_lines_from_facts_md() -> None:
    cfg = lab_host()
    p = plan(cfg)
    assert cfg.host_profile == "lxc-p2p" and cfg.nvidia_driver_version == "590.48.01"
    assert {"iommu=off", "amd_iommu=off", "pcie_aspm=off"} <= set(p.kernel_params)
    assert "options nvidia_uvm uvm_disable_hmm=1" in render_modprobe(p)
    assert render_modules(p).splitlines()[1:] == ["nvidia", "nvidia_uvm", "nvidia_drm"]
    assert "vm.swappiness = 0" in render_sysctls(p)
    block = h200_block()
    # 195 and the dynamic uvm major (238 on the H200 box) and nvidia-caps (241), from facts.
    assert "c 195:* rwm" in block and "c 238:* rwm" in block and "c 241:* rwm" in block
    assert "lxc.mount.entry: /dev/nvidia-uvm dev/nvidia-uvm none bind,optional,create=file" in block


def test_kvm_vfio_files_match_golden() -> None:
    cfg = lab_host(
        host_profile="kvm-vfio",
        kvm_guests=[
            {"vmid": 301, "name": "llm-vm", "pci_addresses": ["0000:c1:00.0", "0000:c2:00.0"]}
        ],
    )
    p = plan(cfg)
    assert "vfio-pci.ids=10de:2bb5" in p.kernel_params and "iommu=pt" in p.kernel_params
    cmdline = edit_params(PVE_CMDLINE.split(), p.kernel_params, p.kernel_params_absent)
    check_golden("host/kvm-vfio.etc-kernel-cmdline", systemd_boot_cmdline(cmdline))
    check_golden("host/kvm-vfio.modules-load.conf", render_modules(p))
    check_golden("host/kvm-vfio.modprobe.conf", render_modprobe(p))
    conf = "machine: q35\nbios: ovmf\nhostpci0: 0000:c1:00.0,pcie=1\nhostpci3: 0000:09:00.0\n"
    commands = qm_set_commands(301, conf, list(cfg.kvm_guests[0].pci_addresses))
    check_golden("host/kvm-vfio.qm-set.txt", "\n".join(commands) + "\n")
    assert commands == ["qm set 301 --hostpci1 0000:c2:00.0,pcie=1", "qm set 301 --delete hostpci3"]


def test_the_eagle3_ab_reference_unit_matches_golden() -> None:
    cfg = lab_guest(served_model="kimi-k2.5-int4-eagle3")
    text = render_unit(cfg, "kimi-k2.5-int4-eagle3", cfg.port, without_draft=True)
    check_golden("llmhost-kimi-k2.5-int4-eagle3-nodraft.service", text)
    assert "--speculative-config" not in text and "Restart=no" in text
    assert "WantedBy" not in text
