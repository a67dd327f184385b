"""vllm-router on a router host: its workers from the inventory and its systemd unit, pure.

Why from the inventory: the router's worker list and the site's serving guests are one fact;
written by hand twice they drift. Why every health, retry and circuit-breaker flag is explicit:
the router's defaults (a check every 60 s, 3 failures) keep a dead replica in rotation for about
three minutes, and its retries alone do not keep a request off it (docs/fleet.md, "What a client
sees"; tests/unit/test_router_retries.py runs the binary against failing workers). The router
does not check the API key (it forwards the client's Authorization header to the worker, which
does), so no key is in its unit, argv or files.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from llmhost.config.router import RouterSettings
from llmhost.render import render_template, systemd_quote

UNIT_NAME = "vllm-router.service"
UNIT_FILE = f"/etc/systemd/system/{UNIT_NAME}"


@dataclass(frozen=True)
class Worker:
    name: str  # inventory name
    url: str  # http://<address>:<port>
    model: str  # the served model its group_data names


class RouterDataError(ValueError):
    """Router data the inventory cannot back; reported as a ConfigError naming the field."""


def choose_workers(settings: RouterSettings, guests: Sequence[Worker]) -> list[Worker]:
    """The router's workers: those named in router.workers, else every serving guest; all
    serving one model (one router per model: a client asks for one name)."""
    by_name = {w.name: w for w in guests}
    if settings.workers:
        unknown = [n for n in settings.workers if n not in by_name]
        if unknown:
            raise RouterDataError(
                f"router.workers: {', '.join(map(repr, unknown))} is not a serving guest of "
                f"this inventory (serving guests: {', '.join(by_name) or 'none'})"
            )
        chosen = [by_name[n] for n in settings.workers]
    else:
        chosen = list(guests)
    if not chosen:
        raise RouterDataError("router.workers: no serving guest to route to in this inventory")
    models = sorted({w.model for w in chosen})
    if len(models) > 1:
        served = ", ".join(f"{w.name}: {w.model}" for w in chosen)
        raise RouterDataError(
            f"router.workers serve different models ({served}): one router per model"
        )
    return chosen


def check_ports(settings: RouterSettings, taken: dict[int, str]) -> None:
    """The router's two ports differ from each other and from what else listens on the host."""
    if settings.port == settings.prometheus_port:
        raise RouterDataError(
            f"router.prometheus_port: {settings.port} is also router.port: give it its own"
        )
    for field, port in (("port", settings.port), ("prometheus_port", settings.prometheus_port)):
        if port in taken:
            raise RouterDataError(f"router.{field}: {port} is taken by {taken[port]} on this host")


# vllm-router 0.1.17's retry backoff (src/core/retry.rs): the n-th retry waits
# initial x multiplier^(n-1), capped, +- jitter. A retry goes to a worker chosen again, so there is
# nothing to wait for: short waits (50, 75, 112 ms for three retries) and a cap far below the
# router's 30 s, so that a raised `retries` never holds a client for long.
RETRY_INITIAL_BACKOFF_MS = 50
RETRY_MAX_BACKOFF_MS = 1000
RETRY_BACKOFF_MULTIPLIER = 1.5
RETRY_JITTER_FACTOR = 0.2
# A half-open circuit closes after this many successes in a row (the router's default).
CB_SUCCESS_THRESHOLD = 3
# The window the circuit breaker counts failures in (the router's default).
CB_WINDOW_S = 120
# How long one /health check may take before it counts as a failure (the router's default).
# A worker that hangs rather than refusing leaves routing after its failed checks, each up to
# this long: later than health_check_interval_s x the threshold says where the interval is
# shorter (the sandbox's 2 s); the retries and the circuit breaker cover requests meanwhile.
HEALTH_CHECK_TIMEOUT_S = 5


def retry_attempts(settings: RouterSettings) -> int:
    """What --retry-max-retries gets: vllm-router counts attempts there, the first one included
    (its --disable-retries is "retry_max_retries=1"), so `retries` retries are retries + 1."""
    return settings.retries + 1


def exec_start(settings: RouterSettings, workers: Sequence[Worker]) -> list[str]:
    s = settings
    argv = [
        f"{s.venv_dir}/bin/vllm-router",
        "--host",
        s.listen_address,
        "--port",
        str(s.port),
        "--worker-urls",
        *[w.url for w in workers],
        "--policy",
        s.policy,
        "--prometheus-host",
        s.listen_address,
        "--prometheus-port",
        str(s.prometheus_port),
        "--health-check-endpoint",
        "/health",
        "--health-check-interval-secs",
        str(s.health_check_interval_s),
        "--health-failure-threshold",
        str(s.health_failure_threshold),
        "--health-success-threshold",
        str(s.health_success_threshold),
        "--health-check-timeout-secs",
        str(HEALTH_CHECK_TIMEOUT_S),
        # Retried (a worker chosen again): a request whose worker refused or dropped the
        # connection, or answered 408/429/500/502/503/504, before the first byte reached the
        # client. Never retried: a stream that has started.
        "--retry-max-retries",
        str(retry_attempts(s)),
        "--retry-initial-backoff-ms",
        str(RETRY_INITIAL_BACKOFF_MS),
        "--retry-max-backoff-ms",
        str(RETRY_MAX_BACKOFF_MS),
        "--retry-backoff-multiplier",
        str(RETRY_BACKOFF_MULTIPLIER),
        "--retry-jitter-factor",
        str(RETRY_JITTER_FACTOR),
        # What keeps a retry off a dead worker before the health checks notice it.
        "--cb-failure-threshold",
        str(s.cb_failure_threshold),
        "--cb-success-threshold",
        str(CB_SUCCESS_THRESHOLD),
        "--cb-timeout-duration-secs",
        str(s.cb_open_s),
        "--cb-window-duration-secs",
        str(CB_WINDOW_S),
        "--request-timeout-secs",
        str(s.request_timeout_s),
        "--worker-startup-timeout-secs",
        str(s.worker_startup_timeout_s),
        "--worker-startup-check-interval",
        str(s.worker_startup_check_interval_s),
    ]
    return [systemd_quote(a) for a in argv]


# How long a started router may take to answer. vllm-router listens only once every worker
# answers /health (it waits up to --worker-startup-timeout-secs), so a site run that restarted
# it waits here: a router that does not answer fails its host, naming the journal to read.
ANSWER_TIMEOUT_S = 180


def answers_command(settings: RouterSettings, timeout_s: int = ANSWER_TIMEOUT_S) -> str:
    """A shell command on the router host that waits until /list_workers answers."""
    host = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(
        settings.listen_address, settings.listen_address
    )
    address = f"[{host}]" if ":" in host else host
    url = f"http://{address}:{settings.port}/list_workers"
    script = (
        "import sys,time,urllib.request as u\n"
        f"end=time.time()+{timeout_s}\n"
        "while time.time()<end:\n"
        " try:\n"
        f"  u.urlopen('{url}',timeout=5).read(); sys.exit(0)\n"
        " except Exception: time.sleep(1)\n"
        f"print('vllm-router: {url} did not answer within {timeout_s} s (it listens once every "
        f"worker answers /health): journalctl -u {UNIT_NAME}', file=sys.stderr)\n"
        "sys.exit(1)\n"
    )
    return f"python3 -c {shlex.quote(script)}"


def render_unit(settings: RouterSettings, workers: Sequence[Worker]) -> str:
    return render_template(
        "vllm-router.service.j2",
        s=settings,
        workers=workers,
        exec_start=exec_start(settings, workers),
    )
