"""Two catalogs: the production one holds real models only; the sandbox adds the test bed's.

A typo in a real site's served_model lists real models, never the tiny ones or the drills;
the sandbox (group_data/sandbox.py: `catalogs = ("testbed",)`) serves them. An extra catalog
adds models and never redefines one; a file it cannot read is refused, the path named.
"""

from __future__ import annotations

import re
import runpy
from pathlib import Path

import pytest

from llmhost.bench.__main__ import main as bench_main
from llmhost.catalog import CatalogError, load_catalog, servable_models
from llmhost.config.guest import GuestConfig
from llmhost.config.loading import ConfigError, validate
from tests.helpers import REPO, lab_guest

REAL = {"kimi-k2.5-int4", "kimi-k2.5-int4-eagle3", "kimi-k2.5-eagle3-mla", "minimax-m2.5", "glm-5"}
TESTBED_ONLY = ("tiny", "smollm", "badflag", "-wrong", "traffic")


def sandbox_group_data() -> dict[str, object]:
    """The values group_data/sandbox.py sets (the inventory's per-host data needs a sandbox)."""
    values = runpy.run_path(str(REPO / "group_data" / "sandbox.py"))
    return {k: v for k, v in values.items() if not k.startswith("_")}


def test_the_production_catalog_holds_real_models_only() -> None:
    catalog = load_catalog()
    assert set(catalog) == REAL
    for name, profile in catalog.items():
        assert not any(word in name for word in TESTBED_ONLY), name
        assert profile.accelerator == "cuda" and profile.source == "hub", name


def test_the_testbed_catalog_adds_the_sandbox_models_and_drills() -> None:
    catalog = load_catalog(("testbed",))
    assert set(catalog) > REAL
    for name in ("tiny-llama", "tiny-llama-spec", "smollm2-135m", "tiny-llama-badflag"):
        assert name in servable_models(("testbed",)), name
    assert catalog["tiny-llama-draft"].draft_only
    assert all(catalog[n].accelerator == "cpu" for n in set(catalog) - REAL)
    assert load_catalog(("testbed",)) is catalog  # cached


def test_a_lab_guest_refuses_a_test_bed_model_and_lists_only_real_ones() -> None:
    with pytest.raises(ConfigError) as err:
        lab_guest(served_model="tiny-llama")
    message = str(err.value)
    assert "served_model: unknown model 'tiny-llama'" in message
    allowed = message.split("allowed: ", 1)[1].splitlines()[0].split(", ")
    assert allowed == servable_models()
    assert set(allowed) <= REAL and not any(w in m for m in allowed for w in TESTBED_ONLY)


def test_the_sandbox_site_names_the_testbed_and_serves_tiny_llama() -> None:
    data = sandbox_group_data()
    assert data["catalogs"] == ("testbed",)
    # The sandbox group's own values (a lab guest given them would keep its CUDA driver pin,
    # which a CPU guest refuses).
    cfg = validate(GuestConfig, "sandbox", data)
    assert cfg.served_model == "tiny-llama" and cfg.catalogs == ("testbed",)
    assert cfg.profile.served_name == "tiny-llama"
    assert "tiny-llama-spec" in cfg.catalog()
    assert cfg.profile_for("tiny-llama-eagle3").speculative.draft == "tiny-eagle3"


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


TINY_CUDA = """
[models."{name}"]
accelerator = "cuda"
source = "local-build"
build = "tiny-llama"
served_name = "{name}"
"""


def test_an_extra_catalog_redefining_a_production_model_is_refused(tmp_path: Path) -> None:
    extra = write(tmp_path / "site.toml", TINY_CUDA.format(name="glm-5"))
    with pytest.raises(
        CatalogError, match=f"catalog {re.escape(str(extra))}: model 'glm-5' is already in"
    ):
        load_catalog((str(extra),))
    with pytest.raises(ConfigError) as err:
        lab_guest(catalogs=[str(extra)])
    assert "catalogs:" in str(err.value) and "'glm-5'" in str(err.value)


def test_an_extra_catalog_redefining_another_extras_model_is_refused(tmp_path: Path) -> None:
    extra = write(tmp_path / "site.toml", TINY_CUDA.format(name="tiny-llama"))
    with pytest.raises(CatalogError, match="'tiny-llama' is already in .*testbed"):
        load_catalog(("testbed", str(extra)))


def test_a_missing_extra_catalog_is_refused_naming_its_path(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.toml"
    with pytest.raises(CatalogError, match=f"catalog {re.escape(str(missing))}: cannot read it"):
        load_catalog((str(missing),))
    with pytest.raises(ConfigError) as err:
        lab_guest(catalogs=[str(missing)])
    message = str(err.value)
    assert f"catalogs: catalog {missing}: cannot read it" in message
    assert "served_model" not in message  # one cause, one line


def test_an_extra_entry_extends_a_production_one_from_a_relative_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(
        tmp_path / "site.toml",
        '[models."kimi-k2.5-int4-short"]\nextends = "kimi-k2.5-int4"\nmax_model_len = 32768\n',
    )
    monkeypatch.chdir(tmp_path)  # relative to where pyinfra runs, like secrets files
    catalog = load_catalog(("site.toml",))
    assert catalog["kimi-k2.5-int4-short"].max_model_len == 32768
    assert catalog["kimi-k2.5-int4-short"].tensor_parallel_size == 8  # the parent's
    cfg = lab_guest(catalogs=("site.toml",), served_model="kimi-k2.5-int4-short")
    assert cfg.profile.attention_backend == "TRITON_MLA"


def test_a_bad_entry_in_an_extra_catalog_names_its_file(tmp_path: Path) -> None:
    extra = write(tmp_path / "site.toml", '[models."x"]\nextends = "no-such-model"\n')
    with pytest.raises(
        CatalogError, match=f"catalog {re.escape(str(extra))}: model 'x' extends unknown"
    ):
        load_catalog((str(extra),))


def test_the_bench_cli_finds_test_bed_profiles_only_with_catalog(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    with pytest.raises(SystemExit):
        bench_main(["--url", "http://127.0.0.1:9", "--profile", "tiny-llama"])
    assert "unknown model 'tiny-llama'" in capsys.readouterr().err
    missing = tmp_path / "nowhere.toml"
    with pytest.raises(SystemExit):
        bench_main(["--url", "http://127.0.0.1:9", "--catalog", str(missing), "--model", "m"])
    assert f"--catalog: catalog {missing}: cannot read it" in capsys.readouterr().err
