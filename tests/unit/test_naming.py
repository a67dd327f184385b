"""The one naming rule for what llmhost keeps on a guest per model. The literal paths are the
contract with guests already deployed: a rename here would orphan their units, env files and
records (the retire step finds units by this prefix), so a change must be deliberate."""

from __future__ import annotations

from llmhost import naming
from llmhost.render import unit_paths
from tests.helpers import lab_guest

ROOT = "/opt/llmhost"


def test_a_models_unit_env_file_and_records_follow_one_rule() -> None:
    unit = naming.unit_name("kimi-k2.5-int4")
    assert unit == "llmhost-kimi-k2.5-int4.service"
    assert naming.unit_file(unit) == "/etc/systemd/system/llmhost-kimi-k2.5-int4.service"
    assert naming.dropin_dir(unit) == "/etc/systemd/system/llmhost-kimi-k2.5-int4.service.d"
    assert naming.env_file(unit) == "/etc/llmhost/llmhost-kimi-k2.5-int4.env"
    ab = naming.ab_unit_name("kimi-k2.5-int4")
    assert naming.env_file(ab) == "/etc/llmhost/llmhost-kimi-k2.5-int4-nodraft.env"
    assert naming.proof_record(ROOT, "kimi-k2.5-int4", "last-gate") == (
        "/opt/llmhost/state/llmhost-kimi-k2.5-int4.last-gate"
    )
    assert naming.serving_record(ROOT) == "/opt/llmhost/state/serving.json"
    assert naming.refcheck_cache(ROOT) == "/opt/llmhost/state/refcheck-cache"


def test_back_from_a_unit_to_its_model_only_for_serving_units() -> None:
    assert naming.model_of_unit("llmhost-tiny-llama.service") == "tiny-llama"
    assert naming.model_of_unit("llmhost-tiny-llama-nodraft.service") is None
    assert naming.model_of_unit("llmhost-.service") is None
    assert naming.model_of_unit("vllm-router.service") is None


def test_the_rendered_units_paths_come_from_the_rule() -> None:
    cfg = lab_guest()
    paths = unit_paths(cfg, cfg.served_model)
    assert paths.unit_name == naming.unit_name(cfg.served_model)
    assert paths.unit_file.startswith("/etc/systemd/system/llmhost-")
    assert paths.env_file == f"/etc/llmhost/llmhost-{cfg.served_model}.env"
