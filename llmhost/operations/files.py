"""Whole files written atomically and never shown: units and env files (which hold secrets).

pyinfra's files.put writes the destination in place and prints its content with --diff. A
Ctrl-C mid-upload could then leave half a unit, and --diff would print the API key. Here the
content goes to `<dest>.llmhost-new`, created empty with its final mode first, and is moved
over the destination: a reader (or an interrupted run) sees the old file or the new one.
"""

from __future__ import annotations

import hashlib
import shlex
from io import StringIO

from pyinfra import host
from pyinfra.api import FileUploadCommand, operation
from pyinfra.facts.files import File, Sha256File


@operation()
def atomic_file(
    content: str, dest: str, mode: str = "644", user: str = "root", group: str = "root"
):
    """
    ``dest`` holds exactly ``content`` with this mode and owner; replaced atomically on change.

    + content: the whole file (never logged, also not with --diff)
    + dest: absolute path on the host
    + mode: octal permissions, e.g. "600"
    + user: owner
    + group: group
    """
    wanted = hashlib.sha256(content.encode()).hexdigest()
    info = host.get_fact(File, path=dest)
    same = (
        info
        and host.get_fact(Sha256File, path=dest) == wanted
        and int(info.get("mode") or 0) == int(mode)
        and info.get("user") == user
        and info.get("group") == group
    )
    if same:
        host.noop(f"{dest} is up to date")
        return
    q = shlex.quote
    tmp = f"{dest}.llmhost-new"
    yield f"mkdir -p {q(dest.rsplit('/', 1)[0] or '/')}"
    yield f"install -m {q(mode)} -o {q(user)} -g {q(group)} /dev/null {q(tmp)}"
    yield FileUploadCommand(StringIO(content), tmp)
    yield f"mv -f {q(tmp)} {q(dest)}"
