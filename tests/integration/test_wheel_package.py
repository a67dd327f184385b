"""An installed llmhost renders units: the wheel ships its templates and data files.

Builds the wheel with `uv build`, installs it into a fresh venv outside the checkout and
renders a Kimi unit and env file there, from a working directory with no repository.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO

RENDER = """
from llmhost.catalog import load_catalog
from llmhost.config.guest import CudaGuest
from llmhost.render import render_env, render_unit
import llmhost
cfg = CudaGuest(
    host_name="llm-lxc", host_profile="lxc-p2p", accelerator="cuda", gpu_count=8,
    served_model="kimi-k2.5-int4",
    vllm={"version": "0.19.0", "cuda_variant": "cu128", "python": "3.12"},
    cuda={"toolkit_version": "12.8", "driver_version": "590.48.01"},
)
print("PACKAGE", llmhost.__file__)
print("TESTBED", "tiny-llama" in load_catalog(("testbed",)), "tiny-llama" in load_catalog())
print(render_unit(cfg, cfg.served_model, cfg.port))
print(render_env(cfg, cfg.served_model))
"""


def uv() -> str:
    found = shutil.which("uv") or str(REPO / ".tools" / "bin" / "uv")
    if not Path(found).exists():
        pytest.fail("uv is missing: `make deps` installs it")
    return found


def test_the_installed_wheel_renders_a_unit_and_an_env_file(tmp_path: Path) -> None:
    run = {"check": True, "capture_output": True, "text": True, "timeout": 300}
    subprocess.run([uv(), "build", "--wheel", "-o", str(tmp_path / "dist"), str(REPO)], **run)
    wheel = next((tmp_path / "dist").glob("llmhost-*.whl"))
    venv = tmp_path / "venv"
    subprocess.run([uv(), "venv", "-q", "-p", sys.executable, str(venv)], **run)
    python = str(venv / "bin" / "python")
    subprocess.run([uv(), "pip", "install", "-q", "-p", python, str(wheel)], **run)
    out = subprocess.run([python, "-c", RENDER], cwd=tmp_path, **run).stdout
    assert f"PACKAGE {venv}" in out  # the installed copy, not the checkout
    assert "TESTBED True False" in out  # the test bed's catalog ships, apart from production
    assert "ExecStart=/opt/llmhost/venvs/vllm-0.19.0-cu128/bin/vllm serve" in out
    assert "--tensor-parallel-size 8" in out and "--attention-backend TRITON_MLA" in out
    assert "KillMode=mixed" in out and "NCCL_P2P_LEVEL=PHB" in out
