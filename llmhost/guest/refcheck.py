"""Guest-side: are served greedy tokens transformers' greedy tokens of the same weights?

Uploaded to the guest and run with the vLLM venv's python (torch and transformers come with
vLLM); it imports nothing from llmhost. Reads JSON on stdin:

    {"model_dir": "...", "tolerance": 0.05,
     "cases": [{"prompt_ids": [...], "output_ids": [...]}, ...]}

and runs the model once per case over prompt + served output (teacher forcing). At each
served position it compares the served token with transformers' argmax: equal, or a tie
within `tolerance` logits (bf16 kernels differ in the last bits, so two near-equal
candidates may swap). Anything else means the engine did not compute this model. Writes
one JSON object per case on stdout.

With "cache_dir" in the request, each case's verdict is kept there, keyed by the weights
(their staging marker), the case's token ids, the tolerance and this python: a verdict
depends on nothing else. A converge whose served tokens are the ones already checked (the
usual case: greedy decoding of the same weights) then answers without importing torch;
only new token sequences are run through transformers.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
from pathlib import Path


def check(
    model_dir: str, cases: list[dict], tolerance: float, trust_remote_code: bool = False
) -> list[dict]:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(
        model_dir, torch_dtype=torch.float32, trust_remote_code=trust_remote_code
    )
    model.eval()
    out = []
    for case in cases:
        prompt, served = list(case["prompt_ids"]), list(case["output_ids"])
        ids = torch.tensor([prompt + served])
        with torch.no_grad():
            logits = model(ids).logits[0].float()
        start = len(prompt) - 1
        first_mismatch = None
        max_gap = 0.0
        for j, token in enumerate(served):
            row = logits[start + j]
            best = int(row.argmax())
            gap = float(row[best] - row[token])
            if best != token and first_mismatch is None:
                first_mismatch = j
            max_gap = max(max_gap, gap)
        out.append(
            {
                "tokens": len(served),
                "exact": first_mismatch is None,
                "first_mismatch": first_mismatch,
                "max_gap": round(max_gap, 5),
                "ok": max_gap <= tolerance,
            }
        )
    return out


def case_key(model_dir: str, case: dict, tolerance: float) -> str:
    marker = Path(model_dir, "llmhost-staged.json")
    if not marker.exists():
        # Weights already on the box (existing_weights) are a link with the marker beside it;
        # the same rule as llmhost/operations/models.py local_files (this imports nothing).
        marker = Path(model_dir).parent / f".{Path(model_dir).name}.llmhost-staged.json"
    weights = marker.read_text() if marker.exists() else f"unstaged {model_dir}"
    blob = json.dumps(
        [
            weights,
            model_dir,
            case["prompt_ids"],
            case["output_ids"],
            tolerance,
            os.path.realpath(sys.executable),
        ],
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()


def cached_check(
    model_dir: str, cases: list[dict], tolerance: float, cache: Path, trust: bool = False
) -> list[dict]:
    """Verdicts from the cache; transformers runs only for the cases it has not seen."""
    keys = [case_key(model_dir, c, tolerance) for c in cases]
    found: dict[int, dict] = {}
    for i, key in enumerate(keys):
        with contextlib.suppress(OSError, ValueError):  # absent or torn: computed again
            found[i] = json.loads((cache / f"{key}.json").read_text())
    missing = [i for i in range(len(cases)) if i not in found]
    if missing:
        fresh = check(model_dir, [cases[i] for i in missing], tolerance, trust)
        cache.mkdir(parents=True, exist_ok=True)
        for i, verdict in zip(missing, fresh, strict=True):
            found[i] = verdict
            tmp = cache / f"{keys[i]}.json.tmp"
            tmp.write_text(json.dumps(verdict))
            tmp.replace(cache / f"{keys[i]}.json")
    return [found[i] | {"cached": i not in missing} for i in range(len(cases))]


def main() -> int:
    request = json.load(sys.stdin)
    tolerance = float(request["tolerance"])
    trust = bool(request.get("trust_remote_code"))
    if request.get("cache_dir"):
        cache = Path(request["cache_dir"])
        results = cached_check(request["model_dir"], request["cases"], tolerance, cache, trust)
    else:
        results = check(request["model_dir"], request["cases"], tolerance, trust)
    json.dump(results, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
