"""Is the server really serving? /health alone can stay green after the engine died.

Ready means, in order: /health answers 200, /v1/models lists the served name, and a
one-token completion returns a token. Polled from the control machine, with a progress
line while the model loads (a 1T model takes ~30 minutes; the tiny CPU one ~2).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import requests


@dataclass
class Readiness:
    ready: bool
    stage: str
    detail: str
    waited_s: float
    completion: str = ""
    models: list[str] = field(default_factory=list)


def probe_once(base_url: str, served_name: str, timeout: float = 10) -> Readiness:
    try:
        health = requests.get(f"{base_url}/health", timeout=timeout)
    except requests.RequestException as exc:
        return Readiness(False, "health", f"no answer: {type(exc).__name__}", 0)
    if health.status_code != 200:
        return Readiness(False, "health", f"/health answered {health.status_code}", 0)
    try:
        models = [
            m["id"] for m in requests.get(f"{base_url}/v1/models", timeout=timeout).json()["data"]
        ]
    except (requests.RequestException, ValueError, KeyError) as exc:
        return Readiness(False, "models", f"/v1/models failed: {exc}", 0)
    if served_name not in models:
        return Readiness(False, "models", f"/v1/models lists {models}, not {served_name!r}", 0)
    try:
        resp = requests.post(
            f"{base_url}/v1/completions",
            json={"model": served_name, "prompt": "Hello", "max_tokens": 1, "temperature": 0},
            timeout=max(timeout, 60),
        )
        body = resp.json()
        text = body["choices"][0]["text"]
        tokens = body["usage"]["completion_tokens"]
    except (requests.RequestException, ValueError, KeyError, IndexError) as exc:
        return Readiness(False, "completion", f"1-token completion failed: {exc}", 0, models=models)
    if resp.status_code != 200 or tokens != 1:
        return Readiness(
            False, "completion", f"completion answered {resp.status_code}, {tokens} tokens", 0
        )
    return Readiness(True, "ready", "health, models and a 1-token completion OK", 0, text, models)


def wait_ready(
    base_url: str,
    served_name: str,
    timeout_s: float,
    log: Callable[[str], None] = print,
    interval_s: float = 2.0,
    progress_every_s: float = 15.0,
    crash_check: Callable[[], str | None] | None = None,
) -> Readiness:
    """Poll until ready or timeout; `crash_check` returns a reason to give up early."""
    start = time.monotonic()
    last_log = -progress_every_s
    while True:
        result = probe_once(base_url, served_name)
        waited = time.monotonic() - start
        result.waited_s = round(waited, 1)
        if result.ready:
            return result
        if waited >= timeout_s:
            return result
        if waited - last_log >= progress_every_s:
            log(f"waiting for {base_url} ({waited:.0f}s / {timeout_s:.0f}s): {result.detail}")
            last_log = waited
            crashed = crash_check() if crash_check else None
            if crashed:
                result.stage, result.detail = "crashed", crashed
                return result
        time.sleep(interval_s)
