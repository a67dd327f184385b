"""The exact files deploys/host.py gives the reference box (inventory/lab.py, lxc-p2p, the
H200-captured /proc/devices and /dev/nvidia* as input), against golden files in tests/golden/host/.

Tests only compare (the renders are listed in tests/helpers.py); `make golden` rewrites the
files after a reviewed change.
"""

from __future__ import annotations

from llmhost.host_plan import plan, render_modprobe, render_modules, render_sysctls
from tests.helpers import (
    assert_golden_files,
    eagle3_ab_unit_files,
    h200_block,
    kvm_vfio_host,
    kvm_vfio_host_files,
    lab_host,
    lxc_guest_conf_files,
    lxc_p2p_host_files,
)


def test_lxc_p2p_files_match_golden() -> None:
    assert_golden_files(lxc_p2p_host_files())


def test_lxc_guest_config_block_matches_golden() -> None:
    assert_golden_files(lxc_guest_conf_files())


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
    p = plan(kvm_vfio_host())
    assert "vfio-pci.ids=10de:2bb5" in p.kernel_params and "iommu=pt" in p.kernel_params
    files = kvm_vfio_host_files()
    assert_golden_files(files)
    assert files["host/kvm-vfio.qm-set.txt"].splitlines() == [
        "qm set 301 --hostpci1 0000:c2:00.0,pcie=1",
        "qm set 301 --delete hostpci3",
    ]


def test_the_eagle3_ab_reference_unit_matches_golden() -> None:
    files = eagle3_ab_unit_files()
    assert_golden_files(files)
    text = files["llmhost-kimi-k2.5-int4-eagle3-nodraft.service"]
    assert "--speculative-config" not in text and "Restart=no" in text
    assert "WantedBy" not in text
