"""Benchmark results in `vllm bench serve`'s field names, plus what produced them.

Same names so a result from llmhost and one from `vllm bench serve --save-result` can be
compared key by key (benchmarks/bench_fidelity.py does exactly that).
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field


@dataclass
class RequestOutcome:
    ok: bool
    prompt_len: int
    output_tokens: int = 0
    ttft_s: float = 0.0
    e2el_s: float = 0.0
    itl_s: list[float] = field(default_factory=list)
    error: str = ""


@dataclass
class RunConfig:
    """Everything that decides a number: a result without it cannot be compared."""

    base_url: str
    model: str
    input_len: int
    output_len: int
    max_concurrency: int
    num_prompts: int
    warmup_requests: int
    seed: int
    model_profile: str = ""
    host_profile: str = ""
    host: str = ""
    vllm_version: str = ""
    llmhost_git_sha: str = ""
    date: str = ""
    measured_by: str = ""  # vllm bench serve on the guest, or llmhost's client end to end


@dataclass
class LevelResult:
    """One concurrency level; field names as in vllm/benchmarks/serve.py's result dict."""

    config: RunConfig
    duration: float
    completed: int
    failed: int
    total_input_tokens: int
    total_output_tokens: int
    request_throughput: float
    output_throughput: float
    total_token_throughput: float
    mean_ttft_ms: float
    median_ttft_ms: float
    p99_ttft_ms: float
    mean_tpot_ms: float
    median_tpot_ms: float
    p99_tpot_ms: float
    mean_itl_ms: float
    median_itl_ms: float
    p99_itl_ms: float
    mean_e2el_ms: float
    median_e2el_ms: float
    p99_e2el_ms: float
    errors: list[str] = field(default_factory=list)
    # With several measured runs (BenchProfile.runs) this result is the median run's, and
    # these are every run's output tok/s and their coefficient of variation.
    runs_output_throughput: list[float] = field(default_factory=list)
    spread: float = 0.0
    # The warm-up before the runs (on the top concurrency's result): how many runs it took,
    # what each read, whether two consecutive ones agreed before its cap.
    warmup: dict | None = None

    @property
    def max_concurrency(self) -> int:
        return self.config.max_concurrency

    @classmethod
    def from_json(cls, data: dict) -> LevelResult:
        fields = {k: v for k, v in data.items() if k not in ("max_concurrency", "num_prompts")}
        fields["config"] = RunConfig(**fields["config"])
        return cls(**fields)

    def to_json(self) -> dict:
        data = asdict(self)
        data["max_concurrency"] = self.config.max_concurrency
        data["num_prompts"] = self.config.num_prompts
        return data


def coefficient_of_variation(values: list[float]) -> float:
    """Sample standard deviation / mean; 0 for fewer than two values or a zero mean."""
    if len(values) < 2 or not statistics.fmean(values):
        return 0.0
    return statistics.stdev(values) / statistics.fmean(values)


def robust_cv(values: list[float]) -> float:
    """The scatter of `values` around their median that one outlier does not inflate:
    1.4826 x the median absolute deviation / the median (the CV, for normal scatter);
    0 for fewer than two values or a zero median."""
    if len(values) < 2 or not statistics.median(values):
        return 0.0
    mid = statistics.median(values)
    return 1.4826 * statistics.median(abs(x - mid) for x in values) / mid


def median_run(runs: list[LevelResult]) -> LevelResult:
    """The run with the median output tok/s (the lower middle one for an even count), with
    every run's tok/s and their spread attached: what the gate judges and a baseline keeps."""
    if not runs:
        raise ValueError("no measured run to take the median of")
    ordered = sorted(runs, key=lambda r: r.output_throughput)
    chosen = ordered[(len(ordered) - 1) // 2]
    tok_s = [r.output_throughput for r in runs]
    chosen.runs_output_throughput = tok_s
    chosen.spread = coefficient_of_variation(tok_s)
    return chosen


def percentile(values: list[float], pct: float) -> float:
    """Linear interpolation between closest ranks (numpy's default), 0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    k = (len(ordered) - 1) * pct / 100
    lo = int(k)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def summarize(config: RunConfig, outcomes: list[RequestOutcome], duration: float) -> LevelResult:
    done = [o for o in outcomes if o.ok]
    ms = 1000.0
    ttfts = [o.ttft_s * ms for o in done]
    e2els = [o.e2el_s * ms for o in done]
    itls = [x * ms for o in done for x in o.itl_s]
    # TPOT excludes the first token, as vLLM does; single-token outputs have none.
    tpots = [
        (o.e2el_s - o.ttft_s) * ms / (o.output_tokens - 1) for o in done if o.output_tokens > 1
    ]
    out_tokens = sum(o.output_tokens for o in done)
    in_tokens = sum(o.prompt_len for o in done)

    def stats(values: list[float]) -> tuple[float, float, float]:
        if not values:
            return 0.0, 0.0, 0.0
        return statistics.fmean(values), statistics.median(values), percentile(values, 99)

    t, tp, i, e = stats(ttfts), stats(tpots), stats(itls), stats(e2els)
    return LevelResult(
        config=config,
        duration=duration,
        completed=len(done),
        failed=len(outcomes) - len(done),
        total_input_tokens=in_tokens,
        total_output_tokens=out_tokens,
        request_throughput=len(done) / duration if duration else 0.0,
        output_throughput=out_tokens / duration if duration else 0.0,
        total_token_throughput=(in_tokens + out_tokens) / duration if duration else 0.0,
        mean_ttft_ms=t[0],
        median_ttft_ms=t[1],
        p99_ttft_ms=t[2],
        mean_tpot_ms=tp[0],
        median_tpot_ms=tp[1],
        p99_tpot_ms=tp[2],
        mean_itl_ms=i[0],
        median_itl_ms=i[1],
        p99_itl_ms=i[2],
        mean_e2el_ms=e[0],
        median_e2el_ms=e[1],
        p99_e2el_ms=e[2],
        errors=sorted({o.error for o in outcomes if not o.ok})[:5],
    )
