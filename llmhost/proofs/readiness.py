"""Is the server really serving? /health alone can stay green after the engine died.

Ready means, in order: /health answers 200, /v1/models lists the served name, and a
one-token completion returns a token. Polled from the control machine, with a progress
line while the model loads (a 1T model takes ~30 minutes; the tiny CPU one ~2).

vLLM answers 401 on /v1/* without the site's API key (/health, /metrics, /version and
/tokenize stay open): every llmhost client sends `headers`, built by `auth_headers` from the
key at the last moment, so the key itself travels as a pydantic SecretStr up to there.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

import requests
from pydantic import SecretStr

from llmhost.wait import until

Headers = Mapping[str, str] | None

# The environment variable llmhost's clients read the API key from (`python -m llmhost.bench`,
# which the throughput gate runs as a child process, and `llmhost ask`): never an argument.
API_KEY_ENV = "LLMHOST_API_KEY"


def api_key_from_env(environ: Mapping[str, str] | None = None) -> SecretStr | None:
    """The API key from $LLMHOST_API_KEY, None when it is unset or empty."""
    value = (os.environ if environ is None else environ).get(API_KEY_ENV, "").strip()
    return SecretStr(value) if value else None


def auth_headers(api_key: SecretStr | str | None) -> dict[str, str]:
    """The Authorization header for the API key; no header without a key."""
    if api_key is None:
        return {}
    value = api_key.get_secret_value() if isinstance(api_key, SecretStr) else api_key
    return {"Authorization": f"Bearer {value}"} if value else {}


def unauthorized(status: int, headers: Headers) -> str:
    """What a 401/403 means, never showing the key."""
    if headers and "Authorization" in headers:
        return (
            f"answered {status}: the server refuses the API key sent (not the one it serves with)"
        )
    return f"answered {status}: the server wants an API key (Authorization: Bearer), none was sent"


@dataclass(frozen=True)
class Readiness:
    """The readiness proof's verdict: ready or not, the stage reached, why, how long."""

    ready: bool
    stage: str
    detail: str
    waited_s: float
    completion: str = ""
    models: tuple[str, ...] = ()


def probe_once(
    base_url: str,
    served_name: str,
    timeout: float = 10,
    *,
    headers: Headers = None,
    answer_within: float = 60,
    http: requests.Session | None = None,
) -> Readiness:
    """One look: /health, /v1/models, a 1-token completion (the last two with `headers`).
    The completion may take `answer_within` seconds (a cold server's first one is slow).
    `http` is the endpoint's session, whose connections the polls reuse; none opens one per
    request."""
    hdrs = dict(headers or {})
    client = http if http is not None else requests
    try:
        health = client.get(f"{base_url}/health", timeout=timeout)
    except requests.RequestException as exc:
        return Readiness(False, "health", f"no answer: {type(exc).__name__}", 0)
    if health.status_code != 200:
        return Readiness(False, "health", f"/health answered {health.status_code}", 0)
    try:
        listing = client.get(f"{base_url}/v1/models", headers=hdrs, timeout=timeout)
        if listing.status_code in (401, 403):
            return Readiness(
                False, "auth", f"/v1/models {unauthorized(listing.status_code, hdrs)}", 0
            )
        models = tuple(str(m["id"]) for m in listing.json()["data"])
    except (requests.RequestException, ValueError, KeyError) as exc:
        return Readiness(False, "models", f"/v1/models failed: {exc}", 0)
    if served_name not in models:
        return Readiness(
            False, "models", f"/v1/models lists {list(models)}, not {served_name!r}", 0
        )
    try:
        resp = client.post(
            f"{base_url}/v1/completions",
            json={"model": served_name, "prompt": "Hello", "max_tokens": 1, "temperature": 0},
            headers=hdrs,
            timeout=answer_within,
        )
        if resp.status_code in (401, 403):
            detail = f"/v1/completions {unauthorized(resp.status_code, hdrs)}"
            return Readiness(False, "auth", detail, 0, models=models)
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


# How often a wait looks at the unit for a crash. A unit that exits with a usage error sits in
# systemd's auto-restart for RestartSec (10 s) and then imports vLLM again (~10 s) before it
# exits again: looked at only with the progress line, every 15 s, that state was missed for
# a minute (a bad flag's rollback drill: 61 s to a verdict the first exit gives).
CRASH_CHECK_EVERY_S = 4.0


def wait_ready(
    base_url: str,
    served_name: str,
    timeout_s: float,
    log: Callable[[str], None] = print,
    interval_s: float = 2.0,
    progress_every_s: float = 15.0,
    crash_check: Callable[[], str | None] | None = None,
    *,
    headers: Headers = None,
    http: requests.Session | None = None,
    crash_every_s: float = CRASH_CHECK_EVERY_S,
) -> Readiness:
    """Poll until ready or timeout; `crash_check` returns a reason to give up early.

    A server that refuses the key (stage "auth") will not change its mind: no more polling.
    """
    start = time.monotonic()
    last_log, last_crash_check = -progress_every_s, -crash_every_s  # both due at once
    latest: Readiness | None = None

    def settled() -> bool:
        """Ready, or an answer that waiting will not change (a refused key, a crash)."""
        nonlocal last_log, last_crash_check, latest
        result = probe_once(base_url, served_name, headers=headers, http=http)
        waited = time.monotonic() - start
        result = latest = replace(result, waited_s=round(waited, 1))
        if result.ready or result.stage == "auth":
            return True
        if waited - last_log >= progress_every_s:
            log(f"waiting for {base_url} ({waited:.0f}s / {timeout_s:.0f}s): {result.detail}")
            last_log = waited
        if crash_check and waited - last_crash_check >= crash_every_s:
            last_crash_check = waited
            crashed = crash_check()
            if crashed:
                latest = replace(result, stage="crashed", detail=crashed)
                return True
        return False

    until(settled, timeout_s, every_s=interval_s)
    assert latest is not None  # until() checks at least once
    return latest


# argparse's exit status for a usage error (a flag vLLM does not know, a value it refuses):
# vLLM exits with it before loading anything, and every restart would exit the same way.
USAGE_ERROR_STATUS = "2"
# Restart=always hides a crash loop behind "activating": a load is given up after this many.
CRASH_RESTARTS = 2


def restart_count(state: Mapping[str, str]) -> int:
    """NRestarts of a unit's `systemctl show` (0 where systemd gives none)."""
    return int(state.get("NRestarts", "0") or 0)


def crash_reason(unit: str, state: Mapping[str, str], restarts_before: int) -> str | None:
    """Why waiting for a loading unit is pointless now, from its `systemctl show` (ActiveState,
    SubState, NRestarts, ExecMainStatus), or None: a usage error at its first exit (waiting
    for systemd to repeat it costs two restarts of RestartSec plus vLLM's import each), any
    other crash after CRASH_RESTARTS restarts (a crash can be transient)."""
    exited = state.get("SubState") in ("auto-restart", "failed")
    if exited and state.get("ExecMainStatus") == USAGE_ERROR_STATUS:
        return (
            f"{unit} exited with status {USAGE_ERROR_STATUS} while loading: a usage error "
            "(a flag or a value vLLM refuses, in its journal below); a restart would repeat it"
        )
    restarts = restart_count(state) - restarts_before
    if restarts >= CRASH_RESTARTS:
        return f"{unit} crashed and was restarted {restarts} times while loading"
    return None
