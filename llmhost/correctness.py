"""The correctness probe: no throughput number counts until the answers are right.

A fast server that emits `!!!!` (a classic sign of a broken kernel or a bad quantization
path) would pass a throughput gate. So before benchmarking, fixed prompts are completed
greedily and judged: degenerate output (empty, one character repeated, an endless loop),
golden answers stored with the profile, and, where the weights are at hand on the guest,
token-by-token agreement with transformers running the same weights (refcheck.py).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import threading
from collections.abc import Mapping
from dataclasses import dataclass

import requests

# A served token may differ from transformers' argmax only on a near-tie: measured ties on
# the sandbox are ~0.001 logits (bf16 engine vs float32 reference); a wrong token costs
# 0.6-1.2. 0.02 keeps both an order of magnitude away.
REFERENCE_TOLERANCE = 0.02


def degenerate_reason(text: str, min_repeats: int = 3) -> str | None:
    """Why the text is degenerate, or None. Short legitimate answers ("4", "Paris") pass."""
    stripped = text.strip()
    if not stripped:
        return "empty output"
    chars = set(stripped.replace(" ", ""))
    if len(stripped) >= 4 and len(chars) == 1:
        return f"one character repeated: {stripped[:20]!r}"
    # An endless loop: the output ends in a unit repeated >= min_repeats times, covering
    # at least half of it.
    n = len(stripped)
    for period in range(1, n // min_repeats + 1):
        unit = stripped[n - period :]
        repeats = 1
        while stripped[: n - repeats * period].endswith(unit):
            repeats += 1
        covered = repeats * period
        if repeats >= min_repeats and covered * 2 >= n and (period > 1 or n >= 4):
            if len(unit.strip()) == 0:
                continue
            return f"loop: {unit!r} repeated {repeats} times"
    return None


@dataclass(frozen=True)
class Completion:
    prompt: str
    text: str
    prompt_ids: list[int]
    output_ids: list[int]


def greedy(
    base_url: str,
    served_name: str,
    prompt: str,
    max_tokens: int,
    *,
    headers: Mapping[str, str] | None = None,
    http: requests.Session | None = None,
    timeout: float = 600,
) -> Completion:
    """One greedy completion with its token ids; `headers` carry the API key, `http` is the
    endpoint's session (its connections reused) or none. `timeout`: how long the answer may
    take (the probe's is sized on the profile: proofs/deadlines.py)."""
    post = http.post if http is not None else requests.post
    resp = post(
        f"{base_url}/v1/completions",
        json={
            "model": served_name,
            "prompt": prompt,
            "max_tokens": max_tokens,
            "temperature": 0,
            "return_token_ids": True,
        },
        headers=dict(headers or {}),
        timeout=(min(10.0, timeout), timeout),
    )
    resp.raise_for_status()
    choice = resp.json()["choices"][0]
    return Completion(
        prompt=prompt,
        text=choice["text"],
        prompt_ids=list(choice.get("prompt_token_ids") or []),
        output_ids=list(choice.get("token_ids") or []),
    )


def reference_request(
    model_dir: str,
    completions: list[Completion],
    cache_dir: str | None = None,
    trust_remote_code: bool = False,
) -> str:
    """stdin for refcheck.py on the guest; with `cache_dir`, verdicts it has seen are reused.
    `trust_remote_code`: the model's code is loaded as the server loads it (the profile's)."""
    return json.dumps(
        {
            "model_dir": model_dir,
            "cache_dir": cache_dir,
            "trust_remote_code": trust_remote_code,
            "tolerance": REFERENCE_TOLERANCE,
            "cases": [
                {"prompt_ids": c.prompt_ids, "output_ids": c.output_ids} for c in completions
            ],
        }
    )


class SideTraffic:
    """Short completions back to back: requests that join and leave the probe's batch.

    Lengths 1, 3 and 8 tokens so that some finish while a probe prompt decodes and others
    arrive in the middle of it. Their answers are not judged; only answered ones count as
    traffic (`answered`), and a pass that got none proved nothing.
    The thread and its event are made when it is built, not at import: under pyinfra,
    gevent patches `threading` after this module may have been imported.
    """

    LENGTHS = (1, 3, 8)
    PAUSE_S = 0.02

    def __init__(self, base_url: str, served_name: str, headers: Mapping[str, str]) -> None:
        self.url = f"{base_url}/v1/completions"
        self.served_name, self.headers = served_name, dict(headers)
        self.stop = threading.Event()
        self.sent = 0
        self.answered = 0
        self._thread = threading.Thread(target=self.run, daemon=True, name="llmhost-side")

    def start(self) -> None:
        self._thread.start()

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def run(self) -> None:
        with requests.Session() as session:
            for n in itertools.cycle(self.LENGTHS):
                if self.stop.is_set():
                    return
                body = {
                    "model": self.served_name,
                    "prompt": f"side request {self.sent}",
                    "max_tokens": n,
                    "temperature": 1.0,
                }
                with contextlib.suppress(requests.RequestException):
                    resp = session.post(self.url, json=body, headers=self.headers, timeout=30)
                    self.answered += resp.ok
                self.sent += 1
                self.stop.wait(self.PAUSE_S)


@dataclass
class Verdict:
    ok: bool
    lines: list[str]


def judge(
    completions: list[Completion],
    golden_expect: dict[str, str],
    degenerate_check: bool,
    reference: list[dict | None] | None,
) -> Verdict:
    """Every failing prompt is named with what it returned."""
    lines: list[str] = []
    ok = True
    for i, c in enumerate(completions):
        problems = []
        if degenerate_check and (reason := degenerate_reason(c.text)):
            problems.append(reason)
        expect = golden_expect.get(c.prompt)
        if expect is not None and expect.lower() not in c.text.lower():
            problems.append(f"expected {expect!r}")
        ref = reference[i] if reference is not None else None
        if ref is not None and not ref["ok"]:
            problems.append(
                f"differs from transformers greedy at token {ref['first_mismatch']} "
                f"(logit gap {ref['max_gap']:.3f} > {REFERENCE_TOLERANCE})"
            )
        if problems:
            ok = False
            lines.append(f"FAIL {c.prompt[:40]!r} -> {c.text[:60]!r}: {'; '.join(problems)}")
    checked = [r for r in reference or [] if r is not None]
    if checked:
        exact = sum(1 for r in checked if r["exact"])
        ties = len(checked) - exact
        tokens = sum(r["tokens"] for r in checked)
        note = f", {ties} diverge only on near-ties" if ties and ok else ""
        lines.append(
            f"{exact}/{len(checked)} completions token-identical to transformers greedy "
            f"({tokens} tokens checked{note})"
        )
    if golden_expect:
        asked = [c for c in completions if c.prompt in golden_expect]
        passed = sum(1 for c in asked if golden_expect[c.prompt].lower() in c.text.lower())
        lines.append(f"{passed}/{len(asked)} golden answers found")
    if degenerate_check:
        lines.append("no degenerate output" if ok else "degenerate or wrong output found")
    return Verdict(ok, lines)
