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
"""

from __future__ import annotations

import json
import sys


def check(model_dir: str, cases: list[dict], tolerance: float) -> list[dict]:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32)
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


def main() -> int:
    request = json.load(sys.stdin)
    results = check(request["model_dir"], request["cases"], float(request["tolerance"]))
    json.dump(results, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
