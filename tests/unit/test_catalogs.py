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

REAL = {"kimi-k2.5-int4", "kimi-k2.5-int4-eagle3", "kimi-k2.5-eagle3-mla", "minimax-m2.5"}
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
    # The custom-code tokenizer's model (Kimi's case on the sandbox) says so to every loader.
    assert catalog["tiny-llama-remote-code"].trust_remote_code
    assert catalog["tiny-llama-remote-code"].build == "tiny-llama-custom-tokenizer"
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
    extra = write(tmp_path / "site.toml", TINY_CUDA.format(name="minimax-m2.5"))
    with pytest.raises(
        CatalogError, match=f"catalog {re.escape(str(extra))}: model 'minimax-m2.5' is already in"
    ):
        load_catalog((str(extra),))
    with pytest.raises(ConfigError) as err:
        lab_guest(catalogs=[str(extra)])
    assert "catalogs:" in str(err.value) and "'minimax-m2.5'" in str(err.value)


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


# --- production profiles: pinned commits, and only what the reference box can run ----------

HUB = """
[models."m"]
accelerator = "cuda"
source = "hub"
hf_repo = "org/m"
served_name = "m"
revision = "{revision}"
"""


@pytest.mark.parametrize(
    "revision",
    ["main", "v1.0", "refs/heads/main", "4d01dfe", "4D01DFE0332D63057C186E0B262165819EFB6611"],
)
def test_a_hub_revision_that_is_not_a_commit_is_refused_naming_the_profile(
    tmp_path: Path, revision: str
) -> None:
    extra = write(tmp_path / "site.toml", HUB.format(revision=revision))
    with pytest.raises(CatalogError) as err:
        load_catalog((str(extra),))
    said = str(err.value)
    assert "model 'm': revision:" in said and repr(revision) in said and "commit" in said


def test_every_production_hub_model_is_pinned_to_a_commit_or_left_to_the_site() -> None:
    for name, profile in load_catalog().items():
        if profile.revision is not None:
            assert re.fullmatch(r"[0-9a-f]{40}", profile.revision), name
    assert load_catalog()["kimi-k2.5-eagle3-mla"].revision is None  # no public commit known


def test_a_draft_without_a_commit_refuses_its_guest_until_the_site_pins_one() -> None:
    with pytest.raises(ConfigError) as err:
        lab_guest(served_model="kimi-k2.5-int4-eagle3")
    said = str(err.value)
    assert "'kimi-k2.5-eagle3-mla' (the draft of 'kimi-k2.5-int4-eagle3')" in said
    assert "model_revisions" in said
    sha = "ab" * 20
    cfg = lab_guest(
        served_model="kimi-k2.5-int4-eagle3", model_revisions={"kimi-k2.5-eagle3-mla": sha}
    )
    assert cfg.catalog()["kimi-k2.5-eagle3-mla"].weights_id.endswith(sha)
    for bad, names in (({"kimi-k2.5-eagle3-mla": "main"}, "'main'"), ({"tiny": sha}, "'tiny'")):
        with pytest.raises(ConfigError) as err:
            lab_guest(model_revisions=bad)
        assert "model_revisions" in str(err.value) and names in str(err.value)


def test_glm5_is_not_offered_for_the_reference_box() -> None:
    """It needs sparse MLA, for which vLLM 0.19 has no SM120 backend: not in the catalog, and
    the reason is kept where the state document reads it."""
    assert "glm-5" not in load_catalog()
    ruled_out = runpy.run_path(str(REPO / "group_data" / "all.py"))["ruled_out"]
    assert any("GLM-5" in r["what"] and "sparse MLA" in r["why"] for r in ruled_out)
