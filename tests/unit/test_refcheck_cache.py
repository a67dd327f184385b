"""The correctness reference is computed once per (weights, tokens, venv): a converge that
serves the same greedy tokens again gets its verdicts without running transformers."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from llmhost.guest import script


def load_refcheck():  # noqa: ANN201 - a guest script, loaded by path
    spec = importlib.util.spec_from_file_location("refcheck", script("refcheck.py"))
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


CASES = [{"prompt_ids": [1, 2], "output_ids": [3, 4]}, {"prompt_ids": [5], "output_ids": [6]}]


@pytest.fixture
def refcheck(monkeypatch: pytest.MonkeyPatch):  # noqa: ANN201
    module = load_refcheck()
    calls: list[int] = []

    def fake_check(
        model_dir: str, cases: list[dict], tolerance: float, trust: bool = False
    ) -> list[dict]:
        calls.append(len(cases))
        return [{"tokens": len(c["output_ids"]), "ok": True} for c in cases]

    monkeypatch.setattr(module, "check", fake_check)
    module.calls = calls
    return module


def test_seen_tokens_are_judged_from_the_cache(refcheck, tmp_path: Path) -> None:  # noqa: ANN001
    weights = tmp_path / "model"
    weights.mkdir()
    (weights / "llmhost-staged.json").write_text('{"build": "tiny-llama"}\n')
    first = refcheck.cached_check(str(weights), CASES, 0.05, tmp_path / "cache")
    again = refcheck.cached_check(str(weights), CASES, 0.05, tmp_path / "cache")
    assert refcheck.calls == [2]  # transformers ran once, for both cases
    assert [r["cached"] for r in first] == [False, False]
    assert [r["cached"] for r in again] == [True, True]
    # New served tokens: only that case runs through transformers.
    changed = [CASES[0], {"prompt_ids": [5], "output_ids": [7]}]
    refcheck.cached_check(str(weights), changed, 0.05, tmp_path / "cache")
    assert refcheck.calls == [2, 1]


def test_restaged_weights_are_checked_again(refcheck, tmp_path: Path) -> None:  # noqa: ANN001
    weights = tmp_path / "model"
    weights.mkdir()
    marker = weights / "llmhost-staged.json"
    marker.write_text('{"build": "tiny-llama", "recipe": 1}\n')
    refcheck.cached_check(str(weights), CASES, 0.05, tmp_path / "cache")
    marker.write_text('{"build": "tiny-llama", "recipe": 2}\n')
    refcheck.cached_check(str(weights), CASES, 0.05, tmp_path / "cache")
    assert refcheck.calls == [2, 2]


def test_a_linked_directory_is_keyed_by_the_marker_beside_its_link(
    refcheck,  # noqa: ANN001
    tmp_path: Path,
) -> None:
    site = tmp_path / "site"  # existing_weights: the site's directory, linked into models_dir
    site.mkdir()
    models = tmp_path / "models"
    models.mkdir()
    (models / "tiny-llama").symlink_to(site)
    beside = models / ".tiny-llama.llmhost-staged.json"
    beside.write_text('{"local": "/srv/a", "manifest_sha256": "1"}\n')
    linked = str(models / "tiny-llama")
    first = refcheck.case_key(linked, CASES[0], 0.05)
    beside.write_text('{"local": "/srv/a", "manifest_sha256": "2"}\n')
    relinked = refcheck.case_key(linked, CASES[0], 0.05)
    beside.unlink()
    unstaged = refcheck.case_key(linked, CASES[0], 0.05)
    assert len({first, relinked, unstaged}) == 3  # another manifest: checked again
