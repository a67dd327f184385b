"""The load generator: streaming OpenAI completions at a fixed concurrency.

asyncio + one aiohttp session, as `vllm bench serve` does, so the client costs little CPU
next to a server on the same 2 cores (benchmarks/bench_fidelity.py measures that).
Warm-up requests run first and are not counted. Every request asks for exactly
`output_len` tokens (ignore_eos), so throughput compares across runs and hosts.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Callable, Mapping

import aiohttp

from llmhost.bench.result import LevelResult, RequestOutcome, RunConfig, summarize

ProgressFn = Callable[[int, int, int], None]  # (done, total, output tokens so far)


async def one_request(
    session: aiohttp.ClientSession, url: str, model: str, prompt: list[int], output_len: int
) -> RequestOutcome:
    payload = {
        "model": model,
        "prompt": prompt,
        "max_tokens": output_len,
        "ignore_eos": True,
        "temperature": 0.0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    outcome = RequestOutcome(ok=False, prompt_len=len(prompt))
    start = time.perf_counter()
    last = start
    try:
        async with session.post(url, json=payload) as resp:
            if resp.status != 200:
                outcome.error = f"HTTP {resp.status}: {(await resp.text())[:200]}"
                return outcome
            async for raw in resp.content:
                line = raw.strip()
                if not line.startswith(b"data: "):
                    continue
                data = line[6:]
                if data == b"[DONE]":
                    break
                now = time.perf_counter()
                chunk = json.loads(data)
                if chunk.get("usage"):
                    outcome.output_tokens = chunk["usage"]["completion_tokens"]
                if not chunk.get("choices"):
                    continue  # the usage-only chunk
                if outcome.ttft_s == 0.0:
                    outcome.ttft_s = now - start
                else:
                    outcome.itl_s.append(now - last)
                last = now
    except (TimeoutError, aiohttp.ClientError, ValueError) as exc:
        outcome.error = f"{type(exc).__name__}: {exc}"[:200]
        return outcome
    outcome.e2el_s = time.perf_counter() - start
    outcome.ok = outcome.output_tokens > 0
    if not outcome.ok:
        outcome.error = "stream ended without usage / tokens"
    return outcome


async def run_level_async(
    config: RunConfig,
    prompts: list[list[int]],
    warmup: list[list[int]],
    progress: ProgressFn | None = None,
    request_timeout_s: float = 3600,
    *,
    headers: Mapping[str, str] | None = None,
) -> LevelResult:
    """One level; `headers` (the API key) go on every request and nowhere into the result."""
    url = f"{config.base_url}/v1/completions"
    connector = aiohttp.TCPConnector(limit=config.max_concurrency)
    timeout = aiohttp.ClientTimeout(total=request_timeout_s)
    async with aiohttp.ClientSession(
        connector=connector, timeout=timeout, headers=dict(headers or {})
    ) as session:
        sem = asyncio.Semaphore(config.max_concurrency)

        async def limited(prompt: list[int]) -> RequestOutcome:
            async with sem:
                return await one_request(session, url, config.model, prompt, config.output_len)

        if warmup:
            await asyncio.gather(*(limited(p) for p in warmup))
        done = 0
        tokens = 0
        outcomes: list[RequestOutcome] = []

        async def counted(prompt: list[int]) -> None:
            nonlocal done, tokens
            result = await limited(prompt)
            outcomes.append(result)
            done += 1
            tokens += result.output_tokens
            if progress:
                progress(done, len(prompts), tokens)

        start = time.perf_counter()
        await asyncio.gather(*(counted(p) for p in prompts))
        duration = time.perf_counter() - start
    return summarize(config, outcomes, duration)


def run_level(
    config: RunConfig,
    prompts: list[list[int]],
    warmup: list[list[int]],
    progress: ProgressFn | None = None,
    *,
    headers: Mapping[str, str] | None = None,
) -> LevelResult:
    return asyncio.run(run_level_async(config, prompts, warmup, progress, headers=headers))


class ProgressBar:
    """A one-line bar on a terminal; on a pipe (CI logs, pyinfra), a line per quarter."""

    def __init__(self, label: str, stream=sys.stderr, width: int = 30) -> None:
        self.label = label
        self.stream = stream
        self.width = width
        self.start = time.perf_counter()
        self.tty = stream.isatty()
        self.next_quarter = 1

    def __call__(self, done: int, total: int, tokens: int) -> None:
        elapsed = time.perf_counter() - self.start
        rate = tokens / elapsed if elapsed > 0 else 0.0
        if self.tty:
            filled = int(self.width * done / total)
            bar = "#" * filled + "-" * (self.width - filled)
            end = "\n" if done == total else ""
            self.stream.write(f"\r{self.label} [{bar}] {done}/{total} req {rate:7.1f} tok/s{end}")
        elif done * 4 >= self.next_quarter * total:
            while done * 4 >= self.next_quarter * total:
                self.next_quarter += 1
            self.stream.write(f"{self.label} {done}/{total} requests, {rate:.1f} tok/s\n")
        self.stream.flush()
