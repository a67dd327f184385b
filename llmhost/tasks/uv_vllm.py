"""uv on the guest, then one versioned venv per vLLM pin, synced from its committed lock."""

from __future__ import annotations

from urllib.parse import urlparse

from pyinfra.api import deploy
from pyinfra.api.operation import OperationMeta

from llmhost.config.guest import GuestConfig, PackageSources
from llmhost.guest import script
from llmhost.locks import Lock, load_lock
from llmhost.operations.files import atomic_file
from llmhost.operations.venv import uv_tool, uv_venv
from llmhost.render import (
    bench_levels_path,
    drain_wait_command,
    drain_wait_path,
    gpu_free_path,
    refcheck_path,
    render_entry_shim,
)

GPU_FREE = script("gpu_free.py")
DRAIN_WAIT = script("drain_wait.py")
REFCHECK = script("refcheck.py")
BENCH_LEVELS = script("bench_levels.py")


def vllm_extra_index_urls(cfg: GuestConfig, lock: Lock) -> list[str]:
    """The site's extra indexes, then the pinned CUDA variant's vLLM wheel index."""
    variant = [lock.spec.variant_index] if lock.spec.variant_index else []
    return [*cfg.package_sources.extra_index_urls, *variant]


def pip_index_args(index_url: str) -> str:
    args = f"--index-url {index_url}"
    parsed = urlparse(index_url)
    if parsed.scheme == "http" and parsed.hostname:
        args += f" --trusted-host {parsed.hostname}"
    return args


def locked_venv(
    what: str,
    lock: Lock,
    root_dir: str,
    venv_dir: str,
    uv_version: str,
    sources: PackageSources,
    python: str = "system",
    extra_index_urls: list[str] | None = None,
) -> OperationMeta:
    """uv in its bootstrap venv, the lock on the host, then the venv synced from it (vLLM's
    on a guest, vllm-router's on a router host)."""
    tools = f"{root_dir}/tools"
    uv_tool(
        name=f"uv {uv_version} (bootstrap venv {tools})",
        tools=tools,
        version=uv_version,
        pip_args=pip_index_args(sources.index_url),
    )
    remote_lock = f"{root_dir}/locks/{lock.name}"
    atomic_file(name=f"{what} lock {lock.name}", content=lock.path.read_text(), dest=remote_lock)
    return uv_venv(
        name=f"{what} venv {venv_dir} from {lock.name} (uv; minutes on a first run)",
        path=venv_dir,
        lock=remote_lock,
        lock_sha256=lock.digest,
        lock_python=lock.spec.python_version,
        python=python,
        uv=f"{tools}/bin/uv",
        index_url=sources.index_url,
        extra_index_urls=extra_index_urls or [],
        find_links=list(sources.find_links),
    )


@deploy("uv and the vLLM venv")
def uv_vllm(cfg: GuestConfig) -> tuple[OperationMeta, OperationMeta]:
    lock = load_lock(cfg)  # no lock for the pin: stop here, before any operation runs
    shim_path = f"{cfg.root_dir}/bin/vllm-entry"
    venv = locked_venv(
        "vLLM",
        lock,
        cfg.root_dir,
        cfg.venv_dir,
        cfg.vllm.uv_version,
        cfg.package_sources,
        python=cfg.vllm.python,
        extra_index_urls=vllm_extra_index_urls(cfg, lock),
    )
    shim = atomic_file(
        name="vLLM entry shim",
        content=render_entry_shim(),
        dest=shim_path,
        mode="755",
    )
    install_gpu_free(cfg)
    if drain_wait_command(cfg, cfg.port):  # vLLM before 0.18: the units' ExecStop= drain
        atomic_file(
            name="drain wait (ExecStop= of a vLLM without --shutdown-timeout)",
            content=DRAIN_WAIT.read_text(),
            dest=drain_wait_path(cfg),
        )
    atomic_file(
        name="transformers reference check (correctness probe)",
        content=REFCHECK.read_text(),
        dest=refcheck_path(cfg),
    )
    atomic_file(
        name="vllm bench serve at each level in one process (the throughput gate)",
        content=BENCH_LEVELS.read_text(),
        dest=bench_levels_path(cfg),
    )
    return venv, shim


def install_gpu_free(cfg: GuestConfig) -> OperationMeta:
    """The cleanup script the unit hooks and deploys/cleanup.py run on the guest."""
    return atomic_file(
        name="GPU cleanup script (unit hooks, deploys/cleanup.py)",
        content=GPU_FREE.read_text(),
        dest=gpu_free_path(cfg),
        mode="755",
    )
