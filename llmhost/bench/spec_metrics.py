"""Speculative-decoding counters from /metrics, diffed around a benchmark run.

vLLM exports cumulative counters (vllm:spec_decode_num_drafts_total, _num_draft_tokens_total,
_num_accepted_tokens_total), summed here over label sets (engines). The difference over a
run gives that run's acceptance rate and mean accepted length (1 + accepted / drafts, the
"Mean acceptance length" vLLM logs). The exposition format is read by llmhost/vllm_metrics.py
(prometheus_client's own parser), not by a pattern of ours.
"""

from __future__ import annotations

from dataclasses import dataclass

import requests

from llmhost.vllm_metrics import summed

COUNTERS = {
    "drafts": "vllm:spec_decode_num_drafts_total",
    "draft_tokens": "vllm:spec_decode_num_draft_tokens_total",
    "accepted_tokens": "vllm:spec_decode_num_accepted_tokens_total",
}


@dataclass(frozen=True)
class SpecCounters:
    drafts: float
    draft_tokens: float
    accepted_tokens: float


def parse_spec_counters(metrics_text: str) -> SpecCounters | None:
    """None when the server has no spec-decode counters (no draft configured)."""
    sums = summed(metrics_text, COUNTERS.values())
    if not sums:
        return None
    return SpecCounters(**{key: sums.get(name, 0.0) for key, name in COUNTERS.items()})


def fetch_spec_counters(base_url: str) -> SpecCounters | None:
    resp = requests.get(f"{base_url}/metrics", timeout=30)
    resp.raise_for_status()
    return parse_spec_counters(resp.text)


@dataclass(frozen=True)
class Acceptance:
    drafts: float
    draft_tokens: float
    accepted_tokens: float

    @property
    def rate(self) -> float:
        return self.accepted_tokens / self.draft_tokens if self.draft_tokens else 0.0

    @property
    def mean_accepted_length(self) -> float:
        return 1 + self.accepted_tokens / self.drafts if self.drafts else 0.0

    def text(self) -> str:
        return (
            f"acceptance {self.rate:.1%} ({self.accepted_tokens:.0f}/{self.draft_tokens:.0f} "
            f"draft tokens), mean accepted length {self.mean_accepted_length:.2f} over "
            f"{self.drafts:.0f} drafts"
        )


def acceptance(before: SpecCounters, after: SpecCounters) -> Acceptance:
    return Acceptance(
        drafts=after.drafts - before.drafts,
        draft_tokens=after.draft_tokens - before.draft_tokens,
        accepted_tokens=after.accepted_tokens - before.accepted_tokens,
    )
