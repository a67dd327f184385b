"""The gate's load generator is `vllm bench serve` on the guest: the command it runs (the
key never in argv), and its saved JSON read back under the same field names."""

from __future__ import annotations

import shlex
import subprocess
import time
from dataclasses import replace
from pathlib import Path

from llmhost.bench.guest_bench import (
    GuestBench,
    bench_command,
    level_from_vllm,
    parse_levels,
    stop_command,
)
from llmhost.bench.result import RunConfig
from llmhost.catalog import BenchProfile

BENCH = BenchProfile(input_len=128, output_len=64, tolerance=0.5, baselines={1: 60.0, 8: 250.0})
GUEST = GuestBench(
    python="/opt/llmhost/venvs/v/bin/python",
    script="/opt/llmhost/bin/bench_levels.py",
    shim="/opt/llmhost/bin/vllm-entry",
    port=8000,
    tokenizer="/srv/llmhost/models/tiny-llama",
    env_file="/etc/llmhost/llmhost-tiny-llama.env",
    env=("VLLM_TARGET_DEVICE=cpu",),
)


def test_the_command_measures_at_localhost_with_the_profiles_settings() -> None:
    command = bench_command(GUEST, BENCH, "tiny-llama", [1, 8], "/tmp/out")
    # In its own process group (setsid), its id in a pid file a Ctrl-C's cleanup reads.
    inner = shlex.split(command.split("setsid -w sh -c ", 1)[1])[0]
    assert inner.startswith("echo $$ > /tmp/out.pid; exec timeout 3600 ")
    argv = shlex.split(inner.split("timeout 3600 ", 1)[1])
    assert argv[:4] == [GUEST.python, GUEST.script, "--shim", GUEST.shim]
    flags = {a: b for a, b in zip(argv, argv[1:], strict=False) if not b.startswith("--")}
    assert flags["--levels"] == f"1:{BENCH.num_prompts(1)},8:{BENCH.num_prompts(8)}"
    assert flags["--base-url"] == "http://127.0.0.1:8000"
    assert flags["--random-input-len"] == "128" and flags["--random-output-len"] == "64"
    assert "--ignore-eos" in argv and flags["--temperature"] == "0"
    # The key is read from the unit's env file by the guest's shell: no argv holds it.
    assert "sed -n 's/^VLLM_API_KEY=//p' /etc/llmhost/llmhost-tiny-llama.env" in command
    assert "VLLM_API_KEY" not in " ".join(argv)


def test_the_client_runs_on_the_front_ends_cpus_when_they_are_set() -> None:
    pinned = replace(GUEST, cpus="0-3,8")
    command = bench_command(pinned, BENCH, "tiny-llama", [8], "/tmp/out")
    assert f"timeout 3600 taskset -c 0-3,8 {GUEST.python} " in command
    assert "taskset" not in bench_command(GUEST, BENCH, "tiny-llama", [8], "/tmp/out")


def test_the_saved_json_becomes_a_level_result() -> None:
    config = RunConfig("http://127.0.0.1:8000", "tiny-llama", 128, 64, 8, 32, 2, 0)
    data = {
        "completed": 32,
        "duration": 4.0,
        "total_output_tokens": 2048,
        "output_throughput": 512.0,
        "median_ttft_ms": 20.0,
        "p99_e2el_ms": 900.0,
    }
    result = level_from_vllm(data, config)
    assert (result.output_throughput, result.completed, result.failed) == (512.0, 32, 0)
    assert result.median_ttft_ms == 20.0 and result.p99_e2el_ms == 900.0
    short = level_from_vllm(data | {"completed": 30}, config)
    assert short.failed == 2 and short.errors == ["failed requests"]


def test_each_levels_line_is_read_back() -> None:
    out = (
        'INFO noise\nLLMHOST-BENCH {"max_concurrency": 8, "num_prompts": 32, "result": {"a": 1}}\n'
    )
    assert parse_levels(out) == {8: {"a": 1}}


def test_a_ctrl_c_stops_the_whole_process_group_the_pid_file_names() -> None:
    stop = stop_command("/tmp/out")
    assert stop.startswith('pgid=$(cat /tmp/out.pid 2>/dev/null) && kill -TERM -"$pgid"')
    assert 'kill -KILL -"$pgid"' in stop and stop.endswith("rm -f /tmp/out.pid; true")


def test_the_stop_command_ends_a_real_process_group_under_sh(tmp_path: Path) -> None:
    """The guest's /bin/sh is dash, whose kill takes no `--`: run both for real here."""
    prefix = str(tmp_path / "sweep")
    inner = f"echo $$ > {prefix}.pid; exec timeout 60 sleep 59.5151"
    start = subprocess.Popen(["setsid", "-w", "sh", "-c", inner])
    for _ in range(50):
        if Path(f"{prefix}.pid").exists():
            break
        time.sleep(0.1)
    subprocess.run(["sh", "-c", stop_command(prefix)], check=True, timeout=10)
    assert start.wait(timeout=10) != 0  # killed, not finished
    left = subprocess.run(["pgrep", "-f", "sleep 59.5151"], capture_output=True, text=True)
    assert left.stdout == "", left.stdout
    assert not Path(f"{prefix}.pid").exists()
