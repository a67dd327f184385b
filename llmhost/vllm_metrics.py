"""vLLM's /metrics text, summed per metric over its label sets (engines, models).

Why one place: the spec-decode counters (bench/spec_metrics.py) and a replica's requests in
flight (fleet/drain.py) both read the exposition format the same way, with prometheus_client's
own parser (escaped label values, comments, timestamps), not with a pattern of ours.
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.parser import text_string_to_metric_families


def summed(metrics_text: str, names: Iterable[str]) -> dict[str, float]:
    """{name: the sum of its samples} for each of `names` the text has; absent ones left out."""
    wanted = set(names)
    sums: dict[str, float] = {}
    for family in text_string_to_metric_families(metrics_text):
        for sample in family.samples:
            if sample.name in wanted:
                sums[sample.name] = sums.get(sample.name, 0.0) + float(sample.value)
    return sums
