"""What a Proxmox host should look like, from its data and its profile: pure, so the exact
files the reference box gets are compared against golden files in tests."""

from __future__ import annotations

from dataclasses import dataclass

from llmhost.config.proxmox_host import ProxmoxHostConfig
from llmhost.host_profiles import host_profile

# Sources: research-anchors.md §3 (Proxmox GPU wiki, compressed-tensors#798).
DEFAULT_SYSCTLS: dict[str, int | str] = {
    "vm.swappiness": 0,  # no swap on a serving host; never page model memory out
    "kernel.numa_balancing": 0,  # page migration stalls decode steps on a 2-socket-class box
    "vm.max_map_count": 1048576,  # 262144 runs out with many shared-memory tensors
}

SYSCTL_FILE = "/etc/sysctl.d/90-llmhost.conf"
MODULES_FILE = "/etc/modules-load.d/llmhost.conf"
MODPROBE_FILE = "/etc/modprobe.d/llmhost.conf"
UDEV_RULE_FILE = "/etc/udev/rules.d/70-llmhost-nvidia.rules"
APT_PIN_FILE = "/etc/apt/preferences.d/llmhost-nvidia-driver"
PERSISTENCED_UNIT = "/etc/systemd/system/nvidia-persistenced.service"
SYSTEMD_BOOT_CMDLINE = "/etc/kernel/cmdline"
GRUB_DEFAULT = "/etc/default/grub"
HEADER = "# Managed by llmhost (deploys/host.py); edits are overwritten.\n"


@dataclass(frozen=True)
class HostPlan:
    kernel_params: list[str]
    kernel_params_absent: list[str]
    modules: list[str]
    modprobe_lines: list[str]
    sysctls: dict[str, int | str]
    uses_nvidia_driver: bool  # lxc-p2p: the host's driver serves the GPUs


def plan(cfg: ProxmoxHostConfig) -> HostPlan:
    side = host_profile(cfg.host_profile).host
    assert side is not None, f"{cfg.host_profile} is not a Proxmox host profile"
    ids = ",".join(cfg.gpu_pci_ids)

    def fill(values: tuple[str, ...]) -> list[str]:
        return [v.replace("{gpu_pci_ids}", ids) for v in values]

    present = fill(side.kernel_params)
    extra = list(cfg.kernel_params)
    extra_names = {p.split("=", 1)[0] for p in extra}
    present = [p for p in present if p.split("=", 1)[0] not in extra_names] + extra
    absent = [a for a in fill(side.kernel_params_absent) if a not in extra]
    absent += [a for a in cfg.kernel_params_absent if a not in absent]
    return HostPlan(
        kernel_params=present,
        kernel_params_absent=absent,
        modules=list(side.modules),
        modprobe_lines=fill(side.modprobe),
        sysctls={**DEFAULT_SYSCTLS, **cfg.sysctls},
        uses_nvidia_driver=cfg.host_profile == "lxc-p2p",
    )


def render_sysctls(p: HostPlan) -> str:
    return HEADER + "".join(f"{k} = {v}\n" for k, v in sorted(p.sysctls.items()))


def render_modules(p: HostPlan) -> str:
    return HEADER + "".join(f"{m}\n" for m in p.modules)


def render_modprobe(p: HostPlan) -> str:
    return HEADER + "".join(f"{line}\n" for line in p.modprobe_lines)


def render_udev_rule() -> str:
    """/dev/nvidia-uvm does not exist until the first CUDA call unless created at boot; an
    LXC guest started before that finds no node to bind-mount."""
    return HEADER + (
        'KERNEL=="nvidia", RUN+="/usr/bin/nvidia-modprobe -c0"\n'
        'KERNEL=="nvidia_uvm", RUN+="/usr/bin/nvidia-modprobe -c0 -u"\n'
        'KERNEL=="nvidia_modeset", RUN+="/usr/bin/nvidia-modprobe -c0 -m"\n'
    )


def render_apt_pin(driver_version: str) -> str:
    """Hold the driver at the pinned version: an unattended upgrade would break the guests'
    userspace (which must match the host's kernel module exactly)."""
    return HEADER + (
        "Package: nvidia-* libnvidia-* libcuda1 libnvcuvid1 libnvoptix1 xserver-xorg-video-nvidia*"
        f"\nPin: version {driver_version}*\nPin-Priority: 1001\n"
    )


def render_persistenced_unit() -> str:
    """The .run installer ships no unit; this is NVIDIA's sample, kept on across reboots."""
    return HEADER + (
        "[Unit]\n"
        "Description=NVIDIA Persistence Daemon (llmhost)\n"
        "Wants=syslog.target\n"
        "\n"
        "[Service]\n"
        "Type=forking\n"
        "ExecStart=/usr/bin/nvidia-persistenced --persistence-mode --verbose\n"
        "ExecStopPost=/bin/rm -rf /var/run/nvidia-persistenced\n"
        "\n"
        "[Install]\n"
        "WantedBy=multi-user.target\n"
    )


def systemd_boot_cmdline(params: list[str]) -> str:
    return " ".join(params) + "\n"
