"""Typed group_data of the site's monitoring: Prometheus and Alertmanager on the `monitoring`
host, node exporter (and the GPU textfile timer) on every Proxmox host and serving guest.

Why typed: a retention without a bound fills the disk; a `for:` of 0 pages on every scrape
blip; an address typo makes Prometheus listen on every interface. All of it is judged before
the first operation, like the rest of group_data.
"""

from __future__ import annotations

import ipaddress
import re

from pydantic import Field, SecretStr, field_validator

from llmhost.config.guest import PackageSources
from llmhost.config.types import IpAddress, Strict

GIB = 1024**3


class MetricsSettings(Strict):
    """node exporter on a host. listen_address None: the address Prometheus scrapes the host
    on when that is an IP (the inventory's ssh_hostname or name), else every interface."""

    port: int = Field(default=9100, ge=1, le=65535)
    listen_address: IpAddress | None = None
    # How often the GPU textfile timer reads nvidia-smi (hosts with NVIDIA GPUs only).
    gpu_interval_s: int = Field(default=15, ge=1, le=3600)
    # The port of NVIDIA's DCGM exporter where the site runs one on this host: Prometheus
    # scrapes it too (job dcgm). The textfile timer stays: DCGM cannot tell a zombie from a
    # server, the timer's unit check can.
    dcgm_exporter_port: int | None = Field(default=None, ge=1, le=65535)


class AlertSettings(Strict):
    """How long each condition must hold before its alert fires; thresholds."""

    replica_down_for_s: int = Field(default=60, ge=1)
    queue_growing_for_s: int = Field(default=300, ge=1)
    kv_cache_high_ratio: float = Field(default=0.95, gt=0, le=1)
    kv_cache_high_for_s: int = Field(default=300, ge=1)
    restarts: int = Field(default=3, ge=1)
    restarts_window_s: int = Field(default=900, ge=60)
    gpu_held_bytes: int = Field(default=GIB, ge=1)
    gpu_held_for_s: int = Field(default=120, ge=1)
    # A model's gate record is 0 from its first converge until its first gate passes, minutes
    # later in the same run (a 1T model's sweep takes a while): not worth a page.
    gate_stale_for_s: int = Field(default=3600, ge=0)


class MonitoringSettings(Strict):
    # Where Prometheus and Alertmanager listen: an address of the monitoring host, never all
    # interfaces by default (there is no default: the site says).
    listen_address: IpAddress
    port: int = Field(default=9090, ge=1, le=65535)
    alertmanager_port: int = Field(default=9093, ge=1, le=65535)
    retention_time: str = "15d"
    retention_size: str = "20GB"
    scrape_interval_s: int = Field(default=15, ge=1, le=300)
    evaluation_interval_s: int = Field(default=15, ge=1, le=300)
    alerts: AlertSettings = AlertSettings()
    # Alertmanager's one receiver: a webhook, or none (alerts visible in its UI and API only).
    # A secret: a chat or paging webhook's URL is its credential. pyinfra and reprs show
    # '**********'; the config file that holds it is 0640 root:prometheus.
    webhook_url: SecretStr | None = None

    @field_validator("listen_address")
    @classmethod
    def _addr(cls, value: str) -> str:
        if ipaddress.ip_address(value).is_unspecified:
            raise ValueError(f"{value} is every interface: give the monitoring host's address")
        return value

    @field_validator("retention_time")
    @classmethod
    def _time(cls, value: str) -> str:
        if not re.fullmatch(r"[1-9][0-9]*(h|d|w|y)", value):
            raise ValueError(f"{value!r} is not a duration like 15d, 2w or 720h")
        return value

    @field_validator("retention_size")
    @classmethod
    def _size(cls, value: str) -> str:
        if not re.fullmatch(r"[1-9][0-9]*(MB|GB|TB)", value):
            raise ValueError(f"{value!r} is not a size like 500MB or 20GB: retention is bounded")
        return value

    @field_validator("webhook_url")
    @classmethod
    def _url(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and not re.fullmatch(r"https?://\S+", value.get_secret_value()):
            raise ValueError("must be an http(s):// URL")  # the value itself is not repeated
        return value


class ExporterConfig(Strict):
    """A host the site's Prometheus scrapes: node exporter, and GPU metrics where it has GPUs."""

    host_name: str
    metrics: MetricsSettings = MetricsSettings()
    package_sources: PackageSources = PackageSources()


class MonitoringConfig(Strict):
    """The `monitoring` host: Prometheus and Alertmanager from Debian's packages."""

    host_name: str
    monitoring: MonitoringSettings
    metrics: MetricsSettings = MetricsSettings()
    package_sources: PackageSources = PackageSources()
