"""Seeded prompts of an exact token length, with no tokenizer on the control machine.

Text from a seeded word generator is tokenized once by the server (/tokenize), cut to
`input_len` token ids and sent as ids, so every request has exactly the input length the
profile states, and each prompt differs from the others (no prefix-cache hits between them).
"""

from __future__ import annotations

import random
from collections.abc import Mapping

import requests

SYLLABLES = [
    "ka",
    "ri",
    "to",
    "mo",
    "se",
    "na",
    "lu",
    "vi",
    "de",
    "po",
    "ga",
    "shi",
    "ne",
    "ru",
    "ta",
    "mi",
    "ko",
    "za",
    "be",
    "lo",
    "fu",
    "ha",
    "je",
    "wi",
    "qua",
    "ster",
    "ing",
    "ton",
    "ber",
    "ox",
    "al",
    "um",
    "ex",
    "pre",
    "con",
    "dis",
    "ver",
    "ment",
]


def seeded_text(seed: int, words: int) -> str:
    rng = random.Random(seed)
    out = []
    for _ in range(words):
        out.append("".join(rng.choice(SYLLABLES) for _ in range(rng.randint(1, 3))))
    return " ".join(out)


def tokenize(
    base_url: str,
    model: str,
    text: str,
    timeout: float = 60,
    *,
    headers: Mapping[str, str] | None = None,
) -> list[int]:
    # vLLM leaves /tokenize open today; the key goes along in case a version closes it.
    resp = requests.post(
        f"{base_url}/tokenize",
        json={"model": model, "prompt": text, "add_special_tokens": False},
        headers=dict(headers or {}),
        timeout=timeout,
    )
    resp.raise_for_status()
    return list(resp.json()["tokens"])


def token_prompts(
    base_url: str,
    model: str,
    count: int,
    input_len: int,
    seed: int,
    *,
    headers: Mapping[str, str] | None = None,
) -> list[list[int]]:
    """`count` distinct prompts of exactly `input_len` token ids, the same for the same seed."""
    prompts = []
    for i in range(count):
        words = max(8, input_len)
        ids: list[int] = []
        part = 0
        while len(ids) < input_len:
            text = seeded_text(seed * 1_000_003 + i * 101 + part, words)
            ids += tokenize(base_url, model, text, headers=headers)
            part += 1
        prompts.append(ids[:input_len])
    return prompts
