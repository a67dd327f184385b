"""Post-deploy proofs: answers are right, throughput holds its baseline, a draft pays.

Like `ready`, these run at execution time from the control machine and yield no command:
a converged host reports zero changes, and a failed proof fails the deploy with the
numbers that failed it. The draft A/B restarts the serving unit (stop it, serve the same
model without its draft, measure, serve it again); it always leaves the unit running.
"""

from __future__ import annotations

import base64
import json
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pyinfra import host
from pyinfra.api import OperationError, StringCommand, operation
from pyinfra.api.operation import OperationMeta
from pyinfra.context import state

from llmhost.bench.gates import ABLine, GateLine, draft_ab, throughput_gate
from llmhost.bench.history import save_run
from llmhost.bench.result import LevelResult
from llmhost.bench.spec_metrics import acceptance, fetch_spec_counters
from llmhost.catalog import BenchProfile, CorrectnessProfile
from llmhost.correctness import greedy, judge, reference_request
from llmhost.operations.log import say
from llmhost.readiness import wait_ready

REPO = Path(__file__).resolve().parents[2]


def guest_run(command: str) -> tuple[bool, str, str]:
    ok, output = host.run_shell_command(StringCommand(command))
    return ok, output.stdout, output.stderr


@operation()
def correct(
    base_url: str,
    served_name: str,
    model: str,
    correctness: CorrectnessProfile,
    model_dir: str,
    python: str,
    refcheck: str,
):
    """
    Greedy completions of the profile's prompts, judged before any number counts.

    + base_url: http://<guest>:<port>
    + served_name: the model name the server answers to
    + model: the catalog profile (for messages)
    + correctness: prompts, golden answers, reference and degenerate settings
    + model_dir: the weights on the guest (for the transformers reference)
    + python: the venv's python on the guest (torch + transformers)
    + refcheck: path of refcheck.py on the guest
    """
    if not state.is_executing:
        return
    golden = {g.prompt: g.expect for g in correctness.golden}
    prompts = list(correctness.prompts) + [g.prompt for g in correctness.golden]
    completions = [greedy(base_url, served_name, p, correctness.max_tokens) for p in prompts]
    reference = None
    if correctness.reference == "transformers":
        request = reference_request(model_dir, completions[: len(correctness.prompts)])
        encoded = base64.b64encode(request.encode()).decode()
        ok, stdout, stderr = guest_run(
            f"echo {encoded} | base64 -d | {shlex.quote(python)} {shlex.quote(refcheck)}"
        )
        if not ok:
            raise OperationError(f"correctness: the transformers reference failed:\n{stderr}")
        reference = json.loads(stdout.strip().splitlines()[-1])
        reference += [None] * len(correctness.golden)  # golden prompts have no reference
    verdict = judge(completions, golden, correctness.degenerate_check, reference)
    if not verdict.ok:
        raise OperationError(f"correctness FAILED for {model}:\n  " + "\n  ".join(verdict.lines))
    say(f"correctness OK for {model}: " + "; ".join(verdict.lines))
    host.noop(f"{model} answers correctly")
    yield from ()


def run_sweep(base_url: str, served_name: str, bench: BenchProfile, labels: dict[str, str]):
    """The benchmark in its own process: pyinfra's gevent patching and asyncio don't mix."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "bench.json"
        argv = [
            sys.executable,
            "-m",
            "llmhost.bench",
            "--url",
            base_url,
            "--model",
            served_name,
            "--bench-json",
            bench.model_dump_json(),
            "--json",
            str(out),
        ]
        argv += [f"--label={k}={v}" for k, v in labels.items()]
        proc = subprocess.run(argv, cwd=REPO, stdout=subprocess.PIPE, text=True)
        if not out.exists():
            raise OperationError(f"benchmark against {base_url} failed (exit {proc.returncode})")
        results = [LevelResult.from_json(r) for r in json.loads(out.read_text())]
    failed = [r for r in results if r.failed]
    if failed:
        errors = "; ".join(e for r in failed for e in r.errors)
        raise OperationError(f"benchmark requests failed at {base_url}: {errors}")
    return results


@dataclass
class UnitSwap:
    """Serve from another unit for a while; the main unit is running again afterwards."""

    main: str
    other: str
    wait: Callable[[str], None]

    def __enter__(self) -> UnitSwap:
        say(f"A/B: stopping {self.main}, starting {self.other} (same model, no draft)")
        ok, _, err = guest_run(f"systemctl stop {self.main} && systemctl start {self.other}")
        try:
            if not ok:
                raise OperationError(f"A/B: could not start {self.other}: {err}")
            self.wait(self.other)
        except BaseException:
            # __exit__ does not run when __enter__ fails: give the main unit back here.
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        say(f"A/B: stopping {self.other}, starting {self.main} again")
        guest_run(f"systemctl stop {self.other}; systemctl start {self.main}")
        self.wait(self.main)


@operation()
def throughput(
    base_url: str,
    served_name: str,
    model: str,
    bench: BenchProfile,
    labels: dict[str, str],
    results_dir: str,
    gate: bool,
    unit: str,
    ab_unit: str | None,
    ab_mode: str,
    ab_tolerance: float,
    load_timeout_s: int,
    unit_restarted: OperationMeta | None = None,
):
    """
    Benchmark at the profile's lengths and concurrencies; gate on its baselines.

    + base_url: http://<guest>:<port>
    + served_name: the model name the server answers to
    + model: the catalog profile
    + bench: lengths, concurrencies (baseline keys), tolerance
    + labels: host, host profile, model profile for the results
    + results_dir: where results and plots go on the control machine
    + gate: fail below baseline x (1 - tolerance)
    + unit: the serving unit
    + ab_unit: the same model without draft (None: no draft)
    + ab_mode: "on-change", "always" or "never"
    + ab_tolerance: how much slower the draft may be, as noise allowance
    + load_timeout_s: how long a restarted unit may take to be ready
    + unit_restarted: the deploy's restart operation ("on-change" asks it)
    """
    if not state.is_executing:
        return
    target = Path(results_dir) if Path(results_dir).is_absolute() else REPO / results_dir
    levels = sorted(bench.baselines)
    before = fetch_spec_counters(base_url)
    say(f"benchmark {model}: {bench.input_len} in / {bench.output_len} out tokens, c={levels}")
    with_draft = run_sweep(base_url, served_name, bench, labels)
    after = fetch_spec_counters(base_url)
    failures: list[str] = []
    verdicts: dict[str, object] = {}
    lines: list[GateLine] = throughput_gate(with_draft, bench)
    for line in lines:
        say(("throughput " if gate else "throughput (not gated) ") + line.text())
    verdicts["gate"] = [vars(line) | {"ok": line.ok} for line in lines] if gate else "off"
    if gate and not all(line.ok for line in lines):
        failures.append(
            f"throughput below baseline for {model}:\n  "
            + "\n  ".join(line.text() for line in lines if not line.ok)
        )
    if before is not None and after is not None:
        acc = acceptance(before, after)
        say(f"speculative decoding {model}: {acc.text()}")
        verdicts["spec_decode"] = {
            "acceptance_rate": acc.rate,
            "mean_accepted_length": acc.mean_accepted_length,
            "drafts": acc.drafts,
            "draft_tokens": acc.draft_tokens,
            "accepted_tokens": acc.accepted_tokens,
        }
    ab_lines: list[ABLine] = []
    if ab_unit:
        changed = unit_restarted is not None and unit_restarted.did_change()
        if ab_mode == "never" or (ab_mode == "on-change" and not changed):
            say(
                f"draft A/B for {model} skipped: the unit did not change in this run "
                "(verify.draft_ab = 'always' runs it every time)"
            )
        else:

            def wait(u: str) -> None:
                result = wait_ready(base_url, served_name, load_timeout_s, log=say)
                if not result.ready:
                    raise OperationError(f"A/B: {u} not ready: {result.stage}: {result.detail}")

            with UnitSwap(unit, ab_unit, wait):
                without = run_sweep(base_url, served_name, bench, labels)
            ab_lines = draft_ab(with_draft, without, levels, ab_tolerance)
            for ab in ab_lines:
                say(f"draft A/B {model} {ab.text()}")
            verdicts["draft_ab"] = [vars(a) | {"ok": a.ok, "ratio": a.ratio} for a in ab_lines]
            save_run(
                target,
                labels.get("host", host.name),
                model,
                "without-draft",
                without,
                bench.baselines,
                {"reference_for": "draft_ab"},
            )
            if not all(a.ok for a in ab_lines):
                failures.append(
                    f"the draft of {model} does not pay:\n  "
                    + "\n  ".join(a.text() for a in ab_lines if not a.ok)
                )
    path = save_run(
        target, labels.get("host", host.name), model, "gate", with_draft, bench.baselines, verdicts
    )
    say(f"benchmark results: {path.relative_to(REPO) if path.is_relative_to(REPO) else path}")
    if failures:
        raise OperationError("\n".join(failures))
    host.noop(f"{model} holds its baseline")
    yield from ()
