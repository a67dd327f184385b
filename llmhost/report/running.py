"""The state document's "Running" section: what the site's Prometheus saw of a model in the
last hour, next to the figures of its last gate.

Why: the gate says how fast a model was when it was measured; the last hour says how it has
served since (throughput, p99 time to first token, engine starts). Read with Prometheus's
HTTP API from the control machine while the report runs; nothing on any host changes. Without
a monitoring host the section is left out; without an answer it says so.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import requests

from llmhost.report.sections import Section, last_gate_lines

Query = Callable[[str], float | None]


def prometheus_query(base_url: str, timeout_s: float = 5) -> Query:
    """One instant query's single value (None when empty); raises on no answer."""

    def query(expr: str) -> float | None:
        reply = requests.get(f"{base_url}/api/v1/query", params={"query": expr}, timeout=timeout_s)
        reply.raise_for_status()
        result = reply.json()["data"]["result"]
        if not result:
            return None
        value = float(result[0]["value"][1])
        return None if math.isnan(value) else value

    return query


def queries(replica: str, model_name: str, unit: str) -> dict[str, str]:
    r = f'replica="{replica}",model_name="{model_name}"'
    vllm = f'job="vllm",replica="{replica}"'
    restarts = f'node_systemd_service_restart_total{{host="{replica}",name="{unit}"}}'
    return {
        "up now": f"max(up{{{vllm}}})",
        "output tok/s, mean": f"avg_over_time(llmhost:output_tokens:rate1m{{{r}}}[1h])",
        "output tok/s, peak (1 min)": f"max_over_time(llmhost:output_tokens:rate1m{{{r}}}[1h])",
        "TTFT p99 (s)": (
            "histogram_quantile(0.99, sum by (le) (rate("
            f'vllm:time_to_first_token_seconds_bucket{{job="vllm",{r}}}[1h])))'
        ),
        "engine starts": f"changes(process_start_time_seconds{{{vllm}}}[1h])",
        "unit restarts by systemd": f"sum(increase({restarts}[1h]))",
    }


def running(
    query: Query, url: str, replica: str, model_name: str, unit: str, gate: dict[str, Any] | None
) -> Section:
    rows: list[dict[str, Any]] = []
    try:
        for item, expr in queries(replica, model_name, unit).items():
            value = query(expr)
            rows.append({"item": item, "actual": "no data" if value is None else round(value, 3)})
    except (requests.RequestException, KeyError, ValueError) as exc:
        return {
            "title": "Running (Prometheus, last hour)",
            "notes": [f"Prometheus at {url} did not answer: {exc.__class__.__name__}"],
        }
    for line in last_gate_lines(gate):
        rows.append(
            {
                "item": f"last gate: c={line['concurrency']} output tok/s",
                "actual": round(line["measured"], 1),
            }
        )
    return {
        "title": "Running (Prometheus, last hour)",
        "rows": rows,
        "notes": [f"from {url}, replica {replica}, model {model_name}"],
    }
