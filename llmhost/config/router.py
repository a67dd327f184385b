"""Typed group_data of a router host: vllm-router in front of the site's serving guests.

Why typed: vllm-router's defaults hide a dead worker for minutes (health checks every 60 s,
3 failures), let it fail ten requests before its circuit opens, and put its metrics on a port
two routers would share; the site states them here, and what the inventory cannot back (no
worker, a worker that is not a serving guest, a port that clashes, retries that a dead worker
could use up) is refused before the first operation.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from llmhost.config.guest import PackageSources
from llmhost.config.types import IpAddress, Strict


class RouterSettings(Strict):
    version: str = "0.1.17"  # vllm-router on PyPI; its hashed lock is locks/vllm-router-*
    uv_version: str = "0.13.9"
    listen_address: IpAddress  # where clients reach it: the site says (0.0.0.0 only if said)
    port: int = Field(default=8080, ge=1, le=65535)
    prometheus_port: int = Field(default=29000, ge=1, le=65535)
    # The serving guests it routes to, by inventory name; empty: every serving guest.
    workers: tuple[str, ...] = ()
    policy: Literal["round_robin", "power_of_two", "cache_aware", "random"] = "round_robin"
    # A dead worker leaves routing after interval x failure threshold seconds.
    health_check_interval_s: int = Field(default=5, ge=1, le=300)
    health_failure_threshold: int = Field(default=2, ge=1, le=20)
    health_success_threshold: int = Field(default=1, ge=1, le=20)
    # Retries of a request that failed before its first byte (connection refused or reset, no
    # response, or 408/429/500/502/503/504) on a worker chosen again; a stream that has started
    # is never retried. vllm-router re-chooses by its policy without leaving out the worker that
    # just failed, so under concurrent load a retry can land on the same dead worker: only its
    # circuit breaker (below) takes that worker out. Hence retries >= cb_failure_threshold: the
    # circuit opens after a request's cb_failure_threshold-th failure on a dead worker, so its
    # next attempt goes elsewhere (0: no retries at all).
    retries: int = Field(default=3, ge=0, le=10)
    # Failures (5xx or no response; 4xx do not count) in a row that take a worker out of routing
    # for cb_open_s, before the health checks notice (the router's default, 10, lets a dead
    # replica fail ten requests first). Not 1: a request that makes every worker answer 500
    # (retried on each) would open every circuit.
    cb_failure_threshold: int = Field(default=3, ge=1, le=20)
    # How long an opened circuit keeps a worker out before one request probes it again.
    cb_open_s: int = Field(default=60, ge=1, le=600)
    request_timeout_s: int = Field(default=1800, ge=1)
    # How long add_worker waits for a replica that is still loading (a 1T model: ~30 min).
    worker_startup_timeout_s: int = Field(default=2400, ge=1)
    # How often add_worker polls a returning replica's /health (the router's default, 30 s,
    # would keep each replica of a roll out of rotation up to 30 s longer than it needs).
    worker_startup_check_interval_s: int = Field(default=5, ge=1, le=300)
    service_user: str = "vllm-router"
    root_dir: str = "/opt/llmhost"

    @field_validator("version")
    @classmethod
    def _version(cls, value: str) -> str:
        if not re.fullmatch(r"\d+\.\d+\.\d+", value):
            raise ValueError(f"{value!r} is not a version like 0.1.17")
        return value

    @model_validator(mode="after")
    def _retries_outlast_the_circuit(self) -> RouterSettings:
        if 0 < self.retries < self.cb_failure_threshold:
            raise ValueError(
                f"retries: {self.retries} is fewer than cb_failure_threshold "
                f"({self.cb_failure_threshold}): under load a request could spend every attempt "
                "on a dead worker before its circuit opens; give retries at least "
                f"{self.cb_failure_threshold} (or 0 for no retries)"
            )
        return self

    @property
    def venv_dir(self) -> str:
        return f"{self.root_dir}/venvs/vllm-router-{self.version}"


class RouterConfig(Strict):
    """A `routers` host."""

    host_name: str
    router: RouterSettings
    package_sources: PackageSources = PackageSources()
