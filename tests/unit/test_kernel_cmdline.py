"""Kernel parameter edits: one parameter changes, the rest of the line stays as it was."""

from __future__ import annotations

from llmhost.kernel_cmdline import edit_params, grub_params, reboot_needed, set_grub_params
from tests.helpers import H200


def test_adds_replaces_and_removes_without_moving_others() -> None:
    line = ["root=ZFS=rpool/ROOT/pve-1", "boot=zfs", "quiet", "intel_iommu=on", "iommu=pt"]
    out = edit_params(line, ["iommu=off", "pcie_aspm=off"], ["intel_iommu"])
    assert out == ["root=ZFS=rpool/ROOT/pve-1", "boot=zfs", "quiet", "iommu=off", "pcie_aspm=off"]


def test_edit_is_idempotent() -> None:
    line = ["root=/dev/sda1", "quiet"]
    once = edit_params(line, ["iommu=off"], ["iommu=pt"])
    assert edit_params(once, ["iommu=off"], ["iommu=pt"]) == once


def test_absent_with_value_removes_only_that_value() -> None:
    line = ["quiet", "iommu=pt"]
    assert edit_params(line, [], ["iommu=off"]) == line
    assert edit_params(line, [], ["iommu=pt"]) == ["quiet"]


def test_duplicate_names_collapse_to_the_wanted_value() -> None:
    assert edit_params(["a=1", "b", "a=2"], ["a=3"], []) == ["a=3", "b"]


def test_grub_default_line_is_edited_in_place() -> None:
    text = 'GRUB_DEFAULT=0\nGRUB_CMDLINE_LINUX_DEFAULT="quiet splash"\nGRUB_CMDLINE_LINUX=""\n'
    assert grub_params(text) == ["quiet", "splash"]
    out = set_grub_params(text, ["quiet", "iommu=off"])
    assert (
        out
        == 'GRUB_DEFAULT=0\nGRUB_CMDLINE_LINUX_DEFAULT="quiet iommu=off"\nGRUB_CMDLINE_LINUX=""\n'
    )
    assert grub_params("GRUB_DEFAULT=0\n") is None
    assert set_grub_params("GRUB_DEFAULT=0\n", ["a"]).endswith('GRUB_CMDLINE_LINUX_DEFAULT="a"\n')


def test_reboot_needed_against_a_real_running_cmdline() -> None:
    running = (H200 / "proc-cmdline.txt").read_text().split()
    assert "quiet" in running and "pci=realloc=off" in running
    problems = reboot_needed(running, ["iommu=off", "quiet"], ["pci", "panic=1"])
    assert problems == ["missing iommu=off", "still has pci=realloc=off", "still has panic=1"]
    assert reboot_needed(running, ["quiet"], ["iommu"]) == []
