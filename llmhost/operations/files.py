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

from llmhost.facts.files import Account, PathStates
from llmhost.operations.step import refusal


@operation()
def atomic_file(
    content: str,
    dest: str,
    mode: str = "644",
    user: str = "root",
    group: str = "root",
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
    info = host.get_fact(PathStates, paths=(dest,)).get(dest)  # one guest command
    same = (
        info is not None
        and info.get("type") == "f"
        and info.get("sha256") == wanted
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


@operation()
def directories(specs: list[tuple[str, str, str, str]]):
    """
    Each ``(path, mode, user, group)`` is a directory with that mode and owner.

    One fact reads them all (a converge pays one guest command, not one a directory);
    only the ones that differ are created or fixed.

    + specs: (path, octal mode, owner, group) per directory
    """
    states = host.get_fact(PathStates, paths=tuple(spec[0] for spec in specs))
    q = shlex.quote
    fixed = []
    for path, mode, user, group in specs:
        info = states.get(path)
        if info is not None and info.get("type") != "d":
            yield refusal(f"{path} exists and is not a directory")
            return
        actual = info and (int(info.get("mode") or 0), info.get("user"), info.get("group"))
        if actual == (int(mode), user, group):
            continue
        fixed.append(path)
        yield f"mkdir -p {q(path)} && chown {q(user)}:{q(group)} {q(path)}"
        yield f"chmod {q(mode)} {q(path)}"
    if not fixed:
        host.noop(f"{len(specs)} directories in place")


@operation()
def service_account(user: str, home: str, shell: str = "/usr/sbin/nologin"):
    """
    A system user with a same-named system group, this home and shell (one guest command).

    + user: the account (and its primary group)
    + home: its home directory (created)
    + shell: its login shell
    """
    account = host.get_fact(Account, user=user)
    q = shlex.quote
    if account is None:
        yield f"getent group {q(user)} >/dev/null || groupadd --system {q(user)}"
        yield (
            f"getent passwd {q(user)} >/dev/null || useradd --system --gid {q(user)} "
            f"--home-dir {q(home)} --create-home --shell {q(shell)} {q(user)}"
        )
        return
    if (
        account["gid"] != account["group_gid"]
        or account["home"] != home
        or (account["shell"] != shell)
    ):
        yield f"usermod --gid {q(user)} --home {q(home)} --shell {q(shell)} {q(user)}"
        yield f"mkdir -p {q(home)} && chown {q(user)}:{q(user)} {q(home)}"
        return
    host.noop(f"account {user} in place")
