"""A CUDA guest's GPU userspace: NVIDIA's driver libraries of exactly the host's version,
and the CUDA toolkit vLLM builds its kernels with.

An LXC guest shares the host's kernel, so it gets the libraries only (`--no-kernel-module`);
/proc/driver/nvidia/version inside it shows the host's module, which is how a mismatch
("Failed to initialize NVML: Driver/library version mismatch") is caught before vLLM
starts. A KVM guest has its own kernel and gets the full driver through DKMS.

The toolkit comes from NVIDIA's apt repository (cuda-toolkit-12-8 installs to
/usr/local/cuda-12.8, the unit's CUDA_HOME). Offline sites mirror that repository and point
package_sources.cuda_apt_repo at the mirror; NVIDIA's PyPI component wheels
(nvidia-cuda-nvcc-cu12 etc.) carry the same pin but no /usr/local/cuda layout.
"""

from __future__ import annotations

import shlex

from llmhost.config.guest import GuestConfig

RUN_FILE_DIR = "/var/cache/llmhost"


def driver_install_commands(cfg: GuestConfig) -> list[str]:
    assert cfg.cuda is not None
    version = cfg.cuda.driver_version
    url = cfg.package_sources.nvidia_driver_url.format(version=version)
    run_file = f"{RUN_FILE_DIR}/NVIDIA-Linux-x86_64-{version}.run"
    flags = ["--silent", "--no-questions", "--ui=none", "--no-nouveau-check"]
    if cfg.host_profile == "lxc-p2p":
        flags.append("--no-kernel-module")  # the host's module serves the container
    else:
        flags.append("--dkms")  # a VM builds its own module against its kernel
    return [
        f"mkdir -p {RUN_FILE_DIR}",
        f"test -s {run_file} || {{ curl -fsSL -o {run_file}.part {shlex.quote(url)} && "
        f"mv {run_file}.part {run_file}; }}",
        f"sh {run_file} {' '.join(flags)}",
    ]


def cuda_packages(cfg: GuestConfig) -> list[str]:
    assert cfg.cuda is not None
    return [f"cuda-toolkit-{cfg.cuda.toolkit_version.replace('.', '-')}"]


def cuda_repo_line(cfg: GuestConfig) -> str:
    return (
        "deb [signed-by=/usr/share/keyrings/cuda-archive-keyring.gpg] "
        f"{cfg.package_sources.cuda_apt_repo} /\n"
    )


def driver_mismatch(host_module: str | None, userspace: str | None, pin: str) -> str | None:
    """Why vLLM must not start here, naming both versions; None when they agree."""
    if host_module is None:
        return (
            f"no NVIDIA kernel module is visible (wanted {pin}): are the GPUs passed through? "
            "run deploys/host.py on the Proxmox host"
        )
    if host_module != pin:
        return f"host NVIDIA kernel module is {host_module}, group_data pins {pin}"
    if userspace is not None and userspace != host_module:
        return (
            f"guest NVIDIA userspace driver {userspace} != host kernel module {host_module} "
            "(NVML would fail with 'Driver/library version mismatch')"
        )
    return None
