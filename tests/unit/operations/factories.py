"""Objects the tables cannot spell as JSON, built from the table's plain data.

Why: some operations take dataclasses (a catalog profile, a switch guard, an endpoint) and
some facts answer with one (NvidiaModule, DirSizes). The cases stay data: a case names an
`args_factory` here, which turns its JSON `args` into the operation's keyword arguments;
a fact whose answer is a typed object has a decoder here, keyed by the fact's class name.
Nothing built here runs anything: a shell or a log handed to an object fails the test if
an operation used it while deciding (that work belongs to execution time).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from llmhost.catalog import load_catalog
from llmhost.endpoint import Endpoint
from llmhost.facts.files import DirSizes
from llmhost.facts.nvidia import NvidiaModule
from llmhost.naming import unit_name
from llmhost.operations.models import LocalSource, StageTools
from llmhost.operations.verify import BenchRun, Cadence, CorrectnessCheck, CorrectnessRecord
from llmhost.proofs.load import DraftAB
from llmhost.switch.guard import RollbackTarget, SwitchGuard
from llmhost.switch.plan import ServingRecord, plan_switch

CATALOG = load_catalog(("testbed",))


def no_shell(command: str) -> tuple[bool, str, str]:
    """A guest shell that must not be used: operations decide without running anything."""
    raise AssertionError(f"an operation ran {command!r} while deciding")


def no_log(line: str) -> None:
    raise AssertionError(f"an operation logged {line!r} through an engine while deciding")


def endpoint(data: dict[str, Any]) -> Endpoint:
    return Endpoint(data["base_url"], data["served_name"])


def correctness_check(data: dict[str, Any]) -> CorrectnessCheck:
    """The probe of a catalog model (its correctness profile) at an endpoint."""
    profile = CATALOG[data["model"]]
    assert profile.correctness is not None, f"{data['model']} has no correctness profile"
    return CorrectnessCheck(
        endpoint=endpoint(data["endpoint"]),
        model=data["model"],
        correctness=profile.correctness,
        model_dir=data.get("model_dir", f"/srv/llmhost/models/{profile.weights_id}"),
        python=data.get("python", "/opt/llmhost/venvs/v/bin/python"),
        refcheck=data.get("refcheck", "/opt/llmhost/bin/refcheck.py"),
        shell=no_shell,
        log=no_log,
    )


def switch_guard(data: dict[str, Any]) -> SwitchGuard:
    """A guard over the plan `plan_switch` makes from the guest's record (serving.json as
    JSON) and the units on disk: the same decision the deploy makes at the start of a run."""
    plan = plan_switch(
        ServingRecord.parse(json.dumps(data.get("record", {}))),
        data["target"],
        data.get("units_on_disk", []),
        data.get("active_units", []),
        set(data.get("co_served", [])),
        data.get("keep_previous", 1),
    )
    source = None
    if plan.source is not None:
        source = RollbackTarget(
            plan.source, Endpoint("http://10.0.0.5:8000", plan.source), 600, check=None
        )
    return SwitchGuard(
        plan,
        data.get("host", "llm-lxc"),
        data.get("record_path", "/opt/llmhost/state/serving.json"),
        unit_name(data["target"]),
        source,
        data.get("gpu_free", "true"),
        data.get("results_dir", "results"),
        shell=no_shell,
        log=no_log,
    )


# --- args factories: the case's JSON args in, the operation's keyword arguments out ---------


def staged_args(args: dict[str, Any]) -> dict[str, Any]:
    """`profile` by catalog name (testbed), `tools` and `local` as their fields."""
    out = {**args, "profile": CATALOG[args["profile"]], "tools": StageTools(**args["tools"])}
    if args.get("local") is not None:
        out["local"] = LocalSource(**args["local"])
    return out


def ready_args(args: dict[str, Any]) -> dict[str, Any]:
    out = {**args, "endpoint": endpoint(args["endpoint"])}
    if args.get("guard") is not None:
        out["guard"] = switch_guard(args["guard"])
    return out


def correct_args(args: dict[str, Any]) -> dict[str, Any]:
    check = correctness_check(args["check"])
    out: dict[str, Any] = {"check": check}
    if args.get("guard") is not None:
        out["guard"] = switch_guard(args["guard"])
    if args.get("record") is not None:
        out["record"] = CorrectnessRecord(args["record"]["unit"], args["record"]["path"], check)
    return out


def load_proofs_args(args: dict[str, Any]) -> dict[str, Any]:
    """The sweep of a catalog model's bench profile; the cadence and the A/B as their fields."""
    run = args["run"]
    profile = CATALOG[run["model"]]
    assert profile.bench is not None, f"{run['model']} has no bench profile"
    out: dict[str, Any] = {
        "run": BenchRun(
            endpoint=endpoint(run["endpoint"]),
            model=run["model"],
            bench=profile.bench,
            labels={"host": run.get("host", "llm-lxc")},
            results_dir=run.get("results_dir", "results"),
            shell=no_shell,
            log=no_log,
        ),
        "gate": args["gate"],
        "cadence": Cadence(**args["cadence"]),
    }
    if args.get("ab") is not None:
        out["ab"] = DraftAB(**args["ab"])
    if args.get("guard") is not None:
        out["guard"] = switch_guard(args["guard"])
    return out


def guard_args(args: dict[str, Any]) -> dict[str, Any]:
    """switch_stop, switch_start, switch_commit: `guard` as switch_guard's data."""
    return {**args, "guard": switch_guard(args["guard"])}


ARGS_FACTORIES: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "staged": staged_args,
    "ready": ready_args,
    "correct": correct_args,
    "load_proofs": load_proofs_args,
    "guard": guard_args,
}


# --- fact decoders: a fact's JSON answer in, the object the fact class returns out ---------


def nvidia_module(data: dict[str, Any]) -> NvidiaModule:
    return NvidiaModule(
        data.get("kernel", ""),
        data.get("version"),
        tuple(data.get("gpu_minors", ())),
        data.get("nvidia_modprobe", False),
    )


def dir_sizes(data: dict[str, Any]) -> DirSizes:
    return DirSizes(data["sizes"], tuple(data.get("errors", ())))


FACT_DECODERS: dict[str, Callable[[Any], Any]] = {
    "NvidiaKernelModule": nvidia_module,
    "FileSizes": dir_sizes,
    "PathKind": tuple,
}
