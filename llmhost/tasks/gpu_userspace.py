"""CUDA guests: NVIDIA userspace of the host's exact version and the CUDA 12.8 toolkit."""

from __future__ import annotations

from io import StringIO

from pyinfra import host
from pyinfra.api import deploy
from pyinfra.api.operation import OperationMeta
from pyinfra.operations import apt, files, server

from llmhost.config.guest import GuestConfig
from llmhost.facts.nvidia import HostDriverVersion, UserspaceDriverVersion
from llmhost.gpu_userspace import (
    cuda_packages,
    cuda_repo_line,
    driver_install_commands,
    driver_mismatch,
)
from llmhost.operations.gpu import driver_versions_match

CUDA_SOURCES = "/etc/apt/sources.list.d/cuda-debian12-x86_64.list"


def driver_refusal(cfg: GuestConfig) -> str | None:
    """An LXC guest sees the host's kernel module: it must be the pinned version. Why not,
    when it is not (the guest is then refused before any change on it)."""
    assert cfg.cuda is not None
    if cfg.host_profile != "lxc-p2p":
        return None  # a VM's module is installed below, with its userspace
    module = host.get_fact(HostDriverVersion)
    return driver_mismatch(module, None, cfg.cuda.driver_version)


@deploy("GPU userspace (NVIDIA driver libraries, CUDA toolkit)")
def gpu_userspace(cfg: GuestConfig) -> list[OperationMeta]:
    """Driver userspace and CUDA; returns the operations whose change means the running
    server is outdated (a new driver or toolkit: the unit restarts and the gate runs)."""
    assert cfg.cuda is not None
    changes = []
    pin = cfg.cuda.driver_version
    # The .run installer needs curl to arrive and kmod; a VM's module builds through DKMS.
    needs = ["curl", "kmod"] + (
        ["dkms", "linux-headers-amd64"] if cfg.host_profile == "kvm-vfio" else []
    )
    apt.packages(
        name="driver installer prerequisites", packages=needs, update=True, cache_time=24 * 3600
    )
    if host.get_fact(UserspaceDriverVersion) != pin:
        driver = server.shell(
            name=f"NVIDIA driver {pin} "
            + (
                "userspace only (--no-kernel-module)" if cfg.host_profile == "lxc-p2p" else "(DKMS)"
            ),
            commands=driver_install_commands(cfg),
        )
        changes.append(driver)
    apt.deb(
        name="NVIDIA CUDA apt keyring",
        src=f"{cfg.package_sources.cuda_apt_repo}cuda-keyring_1.1-1_all.deb",
    )
    files.put(
        name="CUDA apt repository", src=StringIO(cuda_repo_line(cfg)), dest=CUDA_SOURCES, mode="644"
    )
    # The index refresh apart: its daily run is no change of what the server runs.
    apt.update(name="apt indexes (CUDA repository)", cache_time=24 * 3600)
    toolkit = apt.packages(
        name=f"CUDA toolkit {cfg.cuda.toolkit_version}", packages=cuda_packages(cfg)
    )
    # Checked again when it runs if they differed now or this run installed something.
    module, userspace = host.get_fact(HostDriverVersion), host.get_fact(UserspaceDriverVersion)
    differed = driver_mismatch(module, userspace or "absent", pin) is not None
    installs = [*changes, toolkit]
    driver_versions_match(
        name="guest userspace driver == host kernel module",
        pin=pin,
        _if=lambda: differed or any(op.did_change() for op in installs),
    )
    return installs
