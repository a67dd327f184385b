"""The exact unit and env files inventory/lab.py gives the reference box (no GPU needed).

Golden files live in tests/golden/; LLMHOST_UPDATE_GOLDEN=1 rewrites them after a reviewed
change. The assertions below pin the FACTS.md flags independently of the golden bytes.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from llmhost.config.guest import GuestConfig
from llmhost.config.loading import load_guest
from llmhost.inventory import get_host
from llmhost.render import render_env, render_unit, vllm_command

GOLDEN = Path(__file__).resolve().parent.parent / "golden"
LXC = "llm-lxc.lab.example"


def lab_guest(**override: object) -> GuestConfig:
    return load_guest(get_host("inventory/lab.py", LXC, override_data=dict(override)))


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("LLMHOST_UPDATE_GOLDEN"):
        path.write_text(text)
    assert path.exists(), f"missing golden file {path}; run with LLMHOST_UPDATE_GOLDEN=1"
    assert text == path.read_text(), f"{name} differs from its golden file"


@pytest.mark.parametrize("model", ["kimi-k2.5-int4", "kimi-k2.5-int4-eagle3"])
def test_kimi_unit_and_env_match_golden_files(model: str) -> None:
    cfg = lab_guest(served_model=model)
    check_golden(f"llmhost-{model}.service", render_unit(cfg, model, cfg.port))
    check_golden(f"llmhost-{model}.env", render_env(cfg, model))


def test_kimi_flags_are_the_public_recipe() -> None:
    cfg = lab_guest()
    argv = vllm_command(cfg, "kimi-k2.5-int4", 8000)
    joined = " ".join(argv)
    for flag in [
        "--tensor-parallel-size 8",
        "--tool-call-parser kimi_k2",
        "--reasoning-parser kimi_k2",
        "--enable-auto-tool-choice",
        "--trust-remote-code",
        "--disable-custom-all-reduce",
        "--max-model-len 131072",
    ]:
        assert flag in joined
    assert argv[0] == "/opt/llmhost/venvs/vllm-0.16.0-cu129/bin/vllm"
    env = render_env(cfg, "kimi-k2.5-int4")
    assert "VLLM_ATTENTION_BACKEND=TRITON_MLA\n" in env
    assert "CUDA_HOME=/usr/local/cuda-12.8\n" in env
    assert "VLLM_ENGINE_READY_TIMEOUT_S=2400\n" in env


def test_unit_restarts_always_and_kills_the_whole_cgroup() -> None:
    unit = render_unit(lab_guest(), "kimi-k2.5-int4", 8000)
    for line in [
        "KillMode=control-group",
        "Restart=always",
        "TimeoutStartSec=2400",
        "User=vllm",
        "LimitNOFILE=1048576",
        "EnvironmentFile=/etc/llmhost/llmhost-kimi-k2.5-int4.env",
        "ExecStartPre=+/usr/bin/python3 /opt/llmhost/bin/gpu_free.py --user vllm",
        "ExecStopPost=+/usr/bin/python3 /opt/llmhost/bin/gpu_free.py --user vllm",
    ]:
        assert f"\n{line}\n" in unit


def test_eagle3_draft_goes_through_speculative_config() -> None:
    cfg = lab_guest(served_model="kimi-k2.5-int4-eagle3")
    argv = vllm_command(cfg, cfg.served_model, 8000)
    spec = argv[argv.index("--speculative-config") + 1]
    assert spec == (
        '{"method":"eagle3","model":"/srv/llmhost/models/'
        'lightseekorg--kimi-k2.5-eagle3-mla--main","num_speculative_tokens":3}'
    )
    # The target's weights are the plain profile's: switching draft re-downloads nothing.
    assert argv[2] == "/srv/llmhost/models/moonshotai--Kimi-K2.5--main"


def test_kvm_guest_disables_p2p_and_lxc_guest_allows_it() -> None:
    kvm = load_guest(get_host("inventory/lab.py", "llm-vm.lab.example"))
    assert "NCCL_P2P_DISABLE=1\n" in render_env(kvm, kvm.served_model)
    lxc = render_env(lab_guest(), "kimi-k2.5-int4")
    assert "NCCL_P2P_DISABLE" not in lxc and "NCCL_P2P_LEVEL=PHB\n" in lxc


def test_switching_model_is_a_data_change() -> None:
    cfg = lab_guest(served_model="minimax-m2.5")
    unit = render_unit(cfg, cfg.served_model, cfg.port)
    assert "--served-model-name minimax-m2.5" in unit
    assert "--tool-call-parser minimax_m2" in unit
