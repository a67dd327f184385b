"""The state document's "Running" section from Prometheus answers (the queries' exact text, a
silent Prometheus said as such); tests/integration/test_monitoring_sandbox.py reads a live one."""

from __future__ import annotations

import requests

from llmhost.report.running import queries, running

GATE = {"verdicts": {"gate": [{"concurrency": 8, "measured": 612.34}]}}


def test_each_figure_is_queried_for_this_replica_and_model() -> None:
    q = queries("10.99.0.12", "tiny-llama", "llmhost-tiny-llama.service")
    assert q["output tok/s, mean"] == (
        'avg_over_time(llmhost:output_tokens:rate1m{replica="10.99.0.12",'
        'model_name="tiny-llama"}[1h])'
    )
    assert 'name="llmhost-tiny-llama.service"' in q["unit restarts by systemd"]


def test_figures_sit_next_to_the_last_gate() -> None:
    answers = iter([1.0, 42.0, 120.0, None, 2.0, 0.0])
    section = running(lambda _: next(answers), "http://p:9090", "g", "m", "u.service", GATE)
    rows = {r["item"]: r["actual"] for r in section["rows"]}
    assert rows["output tok/s, mean"] == 42.0 and rows["TTFT p99 (s)"] == "no data"
    assert rows["engine starts"] == 2.0
    assert rows["last gate: c=8 output tok/s"] == 612.3


def test_a_prometheus_that_does_not_answer_is_said_not_guessed() -> None:
    def down(_: str) -> float:
        raise requests.ConnectionError("refused")

    section = running(down, "http://p:9090", "g", "m", "u.service", GATE)
    assert "rows" not in section
    assert section["notes"] == ["Prometheus at http://p:9090 did not answer: ConnectionError"]
