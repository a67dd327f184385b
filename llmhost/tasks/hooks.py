"""Post-deploy proof, in order: it serves, it answers right, it is as fast as before.

Readiness first (nothing else means anything before it), then correctness (a fast server
printing `!!!!` must not pass), then the throughput gate with, for a draft profile, the
acceptance counters and the A/B against the same model without its draft.
"""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import deploy
from pyinfra.api.operation import OperationMeta

from llmhost.config.guest import GuestConfig
from llmhost.operations.serving import ready
from llmhost.operations.verify import correct, throughput
from llmhost.render import ab_unit_name, refcheck_path, unit_name, unit_paths
from llmhost.tasks.vllm_service import has_ab_unit


def probe_address(cfg: GuestConfig) -> str:
    """Where the control machine reaches the guest's port."""
    return str(host.data.get("ssh_hostname") or host.name)


@deploy("post-deploy hooks")
def hooks(cfg: GuestConfig, restarts: dict[str, OperationMeta] | None = None) -> None:
    restarts = restarts or {}
    for model, port in cfg.units_and_ports():
        profile = cfg.profile_for(model)
        base_url = f"http://{probe_address(cfg)}:{port}"
        served = str(profile.served_name)
        ready(
            name=f"readiness of {unit_name(model)}",
            unit=unit_name(model),
            base_url=base_url,
            served_name=served,
            timeout_s=profile.load_timeout_s,
        )
        if cfg.verify.correctness and profile.correctness:
            correct(
                name=f"correctness of {model}",
                base_url=base_url,
                served_name=served,
                model=model,
                correctness=profile.correctness,
                model_dir=unit_paths(cfg, model).model_dir,
                python=f"{cfg.venv_dir}/bin/python",
                refcheck=refcheck_path(cfg),
            )
        bench = cfg.bench_for(model)
        with_ab = has_ab_unit(cfg, model)
        if bench and (cfg.verify.throughput_gate or with_ab):
            throughput(
                name=f"throughput of {model}" + (" (with draft A/B)" if with_ab else ""),
                base_url=base_url,
                served_name=served,
                model=model,
                bench=bench,
                labels={
                    "host": host.name,
                    "host_profile": cfg.host_profile,
                    "model_profile": model,
                },
                results_dir=cfg.verify.results_dir,
                gate=cfg.verify.throughput_gate,
                unit=unit_name(model),
                ab_unit=ab_unit_name(model) if with_ab else None,
                ab_mode=cfg.verify.draft_ab,
                ab_tolerance=profile.speculative.ab_tolerance if profile.speculative else 0.0,
                load_timeout_s=profile.load_timeout_s,
                unit_restarted=restarts.get(model),
            )
