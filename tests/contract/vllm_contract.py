"""The site's vLLM judges the site's argv: run with the python of a venv synced from the site's
lock (vLLM 0.19.0 for CUDA 12.8), it imports nothing from llmhost.

Reads JSON on stdin, a list of cases, each what llmhost renders for one production profile:

    {"profile": "kimi-k2.5-int4", "kind": "serve" | "bench",
     "argv": [...],            # serve: the unit's ExecStart; bench: `vllm bench serve` args
     "bench_levels": "...",    # bench: llmhost/guest/bench_levels.py, whose parser the gate uses
     "expect": {...}}          # the values the profile says the argv carries

and writes one JSON verdict a case on stdout: {"profile", "kind", "ok", "problems": [...]}.
Each problem names the flag. What is judged, all by vLLM's own code, on no GPU:

- serve: the argv through vLLM's own CLI (`vllm` and its `serve` subcommand, built the way
  `vllm.entrypoints.cli.main` builds it), then that subcommand's own `validate`; then the
  values vLLM checks only when the engine starts: the attention backend a member of its
  AttentionBackendEnum whose class supports the site's compute capability, the tool and
  reasoning parsers registered (and importable), the speculative config's keys fields of its
  SpeculativeConfig, its method one of SpeculativeMethod, an EAGLE-3 target's model_type in
  vLLM's own list of targets with auxiliary hidden states, and the drain's timeout;
- bench: the gate's argv through the parser the gate itself runs (bench_levels.py's, vLLM's
  `add_cli_args`) with a level's own flags, and through `vllm bench serve`'s subcommand.

vLLM infers its platform from the hardware; with no GPU it would fail to build its parsers
("Failed to infer device type"), so its CPU platform is set first, as `vllm bench` does.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import inspect
import io
import json
import runpy
import sys
import typing
from typing import Any


def cpu_platform() -> None:
    from vllm import platforms
    from vllm.platforms.cpu import CpuPlatform

    platforms.current_platform = CpuPlatform()


def cli_parser() -> tuple[argparse.ArgumentParser, dict[str, Any]]:
    """vLLM's top-level CLI parser and its subcommands, as vllm.entrypoints.cli.main makes it."""
    import vllm.entrypoints.cli.benchmark.main
    import vllm.entrypoints.cli.serve
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser(prog="vllm")
    subparsers = parser.add_subparsers(required=False, dest="subparser")
    commands: dict[str, Any] = {}
    for module in (vllm.entrypoints.cli.serve, vllm.entrypoints.cli.benchmark.main):
        for command in module.cmd_init():
            command.subparser_init(subparsers).set_defaults(dispatch_function=command.cmd)
            commands[command.name] = command
    return parser, commands


def parse(parser: argparse.ArgumentParser, argv: list[str]) -> tuple[Any, str | None]:
    """(namespace, None), or (None, what argparse said) where it refused the argv."""
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            return parser.parse_args(argv), None
    except SystemExit:
        lines = [ln for ln in err.getvalue().strip().splitlines() if ln.strip()]
        return None, (lines[-1] if lines else "refused")


def literal_values(tp: Any) -> set[str]:
    """Every string of a (nested) typing.Literal."""
    if typing.get_origin(tp) is typing.Literal:
        out: set[str] = set()
        for arg in typing.get_args(tp):
            out |= literal_values(arg) if not isinstance(arg, str) else {arg}
        return out
    return set()


def eagle3_targets() -> list[str]:
    """vLLM's own list of model types an EAGLE-3 head may draft for (those that expose
    auxiliary hidden states), read from SpeculativeConfig's source: it is a local list."""
    from vllm.config import speculative

    tree = ast.parse(inspect.getsource(speculative))
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Assign)
            and any(
                isinstance(t, ast.Name) and t.id == "aux_hidden_states_supported"
                for t in node.targets
            )
            and isinstance(node.value, ast.List)
        ):
            return [e.value for e in node.value.elts if isinstance(e, ast.Constant)]
    raise RuntimeError("vLLM's SpeculativeConfig has no aux_hidden_states_supported list")


def check_attention(name: str, capability: list[int] | None) -> str | None:
    from vllm.platforms.interface import DeviceCapability
    from vllm.v1.attention.backends.registry import AttentionBackendEnum

    if name not in AttentionBackendEnum.__members__:
        known = ", ".join(sorted(AttentionBackendEnum.__members__))
        return f"--attention-backend {name}: not one of vLLM's backends ({known})"
    if capability:
        backend = AttentionBackendEnum[name].get_class()
        cap = DeviceCapability(*capability)
        if not backend.supports_compute_capability(cap):
            return (
                f"--attention-backend {name}: vLLM's {backend.__name__} does not support "
                f"compute capability {cap.major}.{cap.minor}"
            )
    return None


def check_parser(kind: str, name: str) -> str | None:
    if kind == "tool":
        from vllm.tool_parsers.abstract_tool_parser import ToolParserManager as Manager

        get, flag = Manager.get_tool_parser, "--tool-call-parser"
    else:
        from vllm.reasoning.abs_reasoning_parsers import ReasoningParserManager as Manager

        get, flag = Manager.get_reasoning_parser, "--reasoning-parser"
    known = sorted(set(Manager.lazy_parsers) | set(getattr(Manager, f"{kind}_parsers", {})))
    if name not in known:
        return f"{flag} {name}: not a registered name ({', '.join(known)})"
    try:
        get(name)
    except Exception as exc:  # noqa: BLE001 - any import failure is the finding
        return f"{flag} {name}: registered, but vLLM cannot load it: {exc}"
    return None


def check_speculative(spec: dict, target_type: str | None) -> list[str]:
    from vllm.config.speculative import SpeculativeConfig, SpeculativeMethod

    problems = []
    fields = set(SpeculativeConfig.__dataclass_fields__)
    unknown = sorted(set(spec) - fields)
    if unknown:
        problems.append(f"--speculative-config: keys {unknown} are not SpeculativeConfig fields")
    method = spec.get("method")
    if method not in literal_values(SpeculativeMethod):
        problems.append(f"--speculative-config: method {method!r} is not a SpeculativeMethod")
    if method == "eagle3":
        targets = eagle3_targets()
        if not target_type:
            problems.append("--speculative-config: eagle3 needs the target's model_type to judge")
        elif not any(t in target_type for t in targets):
            problems.append(
                f"--speculative-config: eagle3 does not draft for model_type {target_type!r} "
                f"(vLLM's targets: {', '.join(targets)})"
            )
    return problems


def judge_serve(case: dict, parser: argparse.ArgumentParser, commands: dict) -> list[str]:
    argv, expect = case["argv"], case.get("expect", {})
    args, refused = parse(parser, argv[1:])  # argv[0] is the venv's `vllm`
    if refused:
        return [f"vllm serve: {refused}"]
    if args.subparser != "serve":
        return [f"not a `vllm serve` argv: {argv[:3]}"]
    try:
        commands["serve"].validate(args)
    except Exception as exc:  # noqa: BLE001 - vLLM's own validation, whatever it raises
        return [f"vllm serve's validation: {exc}"]
    problems = []
    if expect.get("attention_backend"):
        found = args.attention_backend
        found = getattr(found, "name", found)
        if found != expect["attention_backend"]:
            problems.append(f"--attention-backend: parsed as {found!r}")
        else:
            problems.append(check_attention(found, expect.get("compute_capability")))
    for kind, key in (("tool", "tool_call_parser"), ("reasoning", "reasoning_parser")):
        if expect.get(key):
            parsed = getattr(args, key)
            if parsed != expect[key]:
                problems.append(f"--{key.replace('_', '-')}: parsed as {parsed!r}")
            else:
                problems.append(check_parser(kind, parsed))
    if "speculative" in expect:
        spec = args.speculative_config
        if expect["speculative"] is None:
            if spec:
                problems.append(f"--speculative-config given to a server without draft: {spec}")
        elif not isinstance(spec, dict):
            problems.append(f"--speculative-config: parsed as {spec!r}, not a JSON object")
        else:
            problems += check_speculative(spec, expect.get("model_type"))
    if "shutdown_timeout" in expect and args.shutdown_timeout != expect["shutdown_timeout"]:
        problems.append(f"--shutdown-timeout: parsed as {args.shutdown_timeout!r}")
    if "trust_remote_code" in expect and args.trust_remote_code != expect["trust_remote_code"]:
        problems.append(f"--trust-remote-code: parsed as {args.trust_remote_code!r}")
    return [p for p in problems if p]


def judge_bench(case: dict, parser: argparse.ArgumentParser) -> list[str]:
    argv, expect = case["argv"], case.get("expect", {})
    levels = runpy.run_path(case["bench_levels"], run_name="llmhost_bench_levels")
    extra = ["--max-concurrency", "1", "--num-prompts", "8", "--save-result"]
    extra += ["--result-filename", "/tmp/llmhost-contract.json"]
    problems = []
    args, refused = parse(levels["vllm_parser"](), [*argv, *extra])
    if refused:
        problems.append(f"the gate's vllm bench serve (bench_levels.py): {refused}")
    elif args.trust_remote_code != expect.get("trust_remote_code", False):
        problems.append(f"--trust-remote-code: parsed as {args.trust_remote_code!r}")
    _, refused = parse(parser, ["bench", "serve", *argv, *extra])
    if refused:
        problems.append(f"vllm bench serve: {refused}")
    return problems


def main() -> int:
    cases = json.load(sys.stdin)
    cpu_platform()
    parser, commands = cli_parser()
    verdicts = []
    for case in cases:
        try:
            if case["kind"] == "serve":
                problems = judge_serve(case, parser, commands)
            else:
                problems = judge_bench(case, parser)
        except Exception as exc:  # noqa: BLE001 - reported against its case, not a crash
            problems = [f"the check itself failed: {type(exc).__name__}: {exc}"]
        verdicts.append(
            {
                "profile": case["profile"],
                "kind": case["kind"],
                "what": case.get("what", case["kind"]),
                "ok": not problems,
                "problems": problems,
            }
        )
    import vllm

    # Tagged: vLLM logs to stdout too.
    print("LLMHOST-CONTRACT " + json.dumps({"vllm": vllm.__version__, "verdicts": verdicts}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
