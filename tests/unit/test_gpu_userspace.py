"""A CUDA guest's userspace driver and toolkit: the exact commands the lab guests would run
(not executed here: no NVIDIA repository or GPU), and the version check that guards vLLM."""

from __future__ import annotations

from llmhost.facts.nvidia import parse_driver_version, parse_userspace_version
from llmhost.gpu_userspace import (
    cuda_packages,
    cuda_repo_line,
    driver_install_commands,
    driver_mismatch,
)
from llmhost.render import unit_env
from tests.helpers import H200, KVM, LXC, assert_golden_files, gpu_userspace_files, lab_guest


def test_both_guests_userspace_commands_match_golden() -> None:
    assert_golden_files(gpu_userspace_files())


def test_lxc_guest_gets_userspace_only_commands_not_executed() -> None:
    cfg = lab_guest(LXC)
    commands = driver_install_commands(cfg)
    assert commands[-1].endswith("--no-kernel-module")
    assert "NVIDIA-Linux-x86_64-590.48.01.run" in commands[1]
    assert cuda_packages(cfg) == ["cuda-toolkit-12-8"]
    assert unit_env(cfg, cfg.served_model)["CUDA_HOME"] == "/usr/local/cuda-12.8"
    assert cuda_repo_line(cfg).startswith("deb [signed-by=/usr/share/keyrings/cuda-archive")


def test_kvm_guest_builds_its_own_module_commands_not_executed() -> None:
    cfg = lab_guest(KVM)
    commands = driver_install_commands(cfg)
    assert commands[-1].endswith("--dkms") and "--no-kernel-module" not in commands[-1]


def test_versions_from_the_h200_capture() -> None:
    module = parse_driver_version((H200 / "proc-driver-nvidia-version.txt").read_text())
    csv = (H200 / "query-gpu-driver.csv").read_text().splitlines()[1]
    assert module == "580.159.04" == csv.split(", ")[2]
    assert parse_userspace_version(
        [
            "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1",
            "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.580.159.04",
        ]
    ) == ("580.159.04")
    assert parse_userspace_version(["ls: cannot access ..."]) is None


def test_mismatches_name_both_versions() -> None:
    assert driver_mismatch("590.48.01", "590.48.01", "590.48.01") is None
    assert driver_mismatch("590.48.01", None, "590.48.01") is None  # not installed yet
    host_vs_pin = driver_mismatch("580.159.04", None, "590.48.01")
    assert host_vs_pin == "host NVIDIA kernel module is 580.159.04, group_data pins 590.48.01"
    guest_vs_host = driver_mismatch("590.48.01", "590.48.06", "590.48.01")
    assert "590.48.06 != host kernel module 590.48.01" in guest_vs_host
    assert "no NVIDIA kernel module is visible" in driver_mismatch(None, None, "590.48.01")
