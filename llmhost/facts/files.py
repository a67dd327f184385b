"""Small file facts the markers of llmhost's own operations are read with."""

from __future__ import annotations

import shlex
from collections.abc import Iterable
from typing import NamedTuple

from pyinfra.api import FactBase


class FileText(FactBase[str | None]):
    """The text of a (small) file, or None when it does not exist."""

    @staticmethod
    def default() -> None:
        return None

    def command(self, path: str) -> str:
        q = shlex.quote(path)
        return f"if [ -f {q} ]; then echo __present__; cat {q}; else echo __absent__; fi"

    def process(self, output: Iterable[str]) -> str | None:
        lines = list(output)
        if not lines or lines[0] != "__present__":
            return None
        return "\n".join(lines[1:])


class MatchingFiles(FactBase[list[str]]):
    """The files a shell glob matches, sorted; [] when none does."""

    @staticmethod
    def default() -> list[str]:
        return []

    def command(self, directory: str, pattern: str) -> str:
        # The glob is expanded by the shell: quote the directory only.
        q = shlex.quote(directory)
        return f'for p in {q}/{pattern}; do [ -f "$p" ] && echo "$p"; done; true'

    def process(self, output: Iterable[str]) -> list[str]:
        return sorted(line for line in output if line)


class JournalTail(FactBase[list[str]]):
    """The unit's last journal lines, printed when it fails to become ready."""

    @staticmethod
    def default() -> list[str]:
        return []

    def command(self, unit: str, lines: int = 40) -> str:
        return f"journalctl -u {shlex.quote(unit)} -n {int(lines)} --no-pager -o cat || true"

    def process(self, output: Iterable[str]) -> list[str]:
        return list(output)


class UnitState(FactBase[dict[str, str]]):
    """systemctl show of a unit: ActiveState, SubState, NRestarts, ExecMainStatus."""

    @staticmethod
    def default() -> dict[str, str]:
        return {}

    def command(self, unit: str) -> str:
        props = "ActiveState,SubState,NRestarts,ExecMainStatus,Result"
        return f"systemctl show -p {props} {shlex.quote(unit)} || true"

    def process(self, output: Iterable[str]) -> dict[str, str]:
        return dict(line.split("=", 1) for line in output if "=" in line)


class UnitFileState(FactBase[str]):
    """`systemctl show -p UnitFileState` of a unit: enabled, disabled, static (no [Install]
    section, as the draft A/B's twin), or "" when systemd has no such unit file.

    pyinfra's SystemdEnabled counts a static unit as enabled, and `systemctl disable` of one
    changes nothing yet reloads systemd: llmhost reads the state itself."""

    @staticmethod
    def default() -> str:
        return ""

    def command(self, unit: str) -> str:
        return f"systemctl show -p UnitFileState --value {shlex.quote(unit)} 2>/dev/null || true"

    def process(self, output: Iterable[str]) -> str:
        return "".join(output).strip()


def needs_disable(unit_file_state: str) -> bool:
    """Whether `systemctl disable` has links to remove for a unit in this UnitFileState.

    enabled, enabled-runtime, linked and linked-runtime units have symlinks that outlive the
    unit file; static, disabled, masked, generated units and absent ones ("") have none that
    disable would remove, and disable would only reload systemd."""
    return unit_file_state.split("-")[0] in {"enabled", "linked"}


class NewerThanUnit(FactBase[list[str]]):
    """Of `paths`, those modified after the running unit started (its inputs changed since).

    A run interrupted between rewriting a unit's env file and restarting it leaves a server
    older than its inputs; the next run finds that here and restarts it. Empty when the unit
    is not active (starting it is another operation's job).
    """

    @staticmethod
    def default() -> list[str]:
        return []

    def command(self, unit: str, paths: tuple[str, ...]) -> str:
        q = shlex.quote
        return (
            f'[ "$(systemctl is-active {q(unit)})" = active ] || exit 0; '
            f'since=$(date -d "$(systemctl show -p ActiveEnterTimestamp --value {q(unit)})" '
            "+%s 2>/dev/null) || exit 0; "
            f"for f in {' '.join(q(p) for p in paths)}; do "
            '[ -e "$f" ] && [ "$(stat -c %Y "$f")" -gt "$since" ] && echo "$f"; done; true'
        )

    def process(self, output: Iterable[str]) -> list[str]:
        return [line.strip() for line in output if line.strip()]


class NeedsDaemonReload(FactBase[bool]):
    """systemd still runs an older copy of the unit file (changed and not reloaded since)."""

    @staticmethod
    def default() -> bool:
        return False

    def command(self, unit: str) -> str:
        return f"systemctl show -p NeedDaemonReload --value {shlex.quote(unit)} 2>/dev/null || true"

    def process(self, output: Iterable[str]) -> bool:
        return "".join(output).strip() == "yes"


class FreeBytes(FactBase[int | None]):
    """Bytes free for an unprivileged writer on the filesystem that holds `path`.

    `path` need not exist yet (a first deploy): its nearest existing parent is measured.
    """

    @staticmethod
    def default() -> None:
        return None

    def command(self, path: str) -> str:
        return (
            f'p={shlex.quote(path)}; while [ ! -e "$p" ]; do p=$(dirname "$p"); done; '
            'df -B1 --output=avail "$p" | tail -n 1'
        )

    def process(self, output: Iterable[str]) -> int | None:
        text = "".join(output).strip()
        return int(text) if text.isdigit() else None


class ChildDirectories(FactBase[list[str]]):
    """Names of the directories directly under `path` (none when it does not exist)."""

    @staticmethod
    def default() -> list[str]:
        return []

    def command(self, path: str) -> str:
        return f"ls -1 -p {shlex.quote(path)} 2>/dev/null | grep '/$' || true"

    def process(self, output: Iterable[str]) -> list[str]:
        return sorted(line.strip().rstrip("/") for line in output if line.strip())


class PathStates(FactBase[dict[str, dict[str, str]]]):
    """Type, mode, owner and (files) sha256 of many paths in one command.

    Each command costs a guest ssh session (~50 ms on the sandbox, mostly sshd's session
    setup): a converge that checks 30 managed files one fact each spends seconds on it.
    Operations of one task pass the same tuple, so pyinfra runs this once for all of them.
    """

    @staticmethod
    def default() -> dict[str, dict[str, str]]:
        return {}

    def command(self, paths: tuple[str, ...]) -> str:
        quoted = " ".join(shlex.quote(p) for p in paths)
        return (
            f"for p in {quoted}; do "
            'if [ -d "$p" ]; then printf "d\\t%s\\t%s\\n" "$p" "$(stat -L -c "%a %U %G" "$p")"; '
            'elif [ -f "$p" ]; then printf "f\\t%s\\t%s %s\\n" "$p" '
            '"$(stat -L -c "%a %U %G" "$p")" "$(sha256sum < "$p" | cut -d" " -f1)"; '
            'else printf "%s\\t%s\\t\\n" - "$p"; fi; done'
        )

    def process(self, output: Iterable[str]) -> dict[str, dict[str, str]]:
        states: dict[str, dict[str, str]] = {}
        for line in output:
            kind, _, rest = line.partition("\t")
            path, _, info = rest.partition("\t")
            if kind == "-" or not path:
                continue
            fields = info.split()
            state = dict(zip(("mode", "user", "group", "sha256"), fields, strict=False))
            states[path] = {"type": kind, **state}
        return states


class ToolVersion(FactBase[str | None]):
    """`<path> --version`'s version word (e.g. uv 0.13.9 -> "0.13.9"); None when absent."""

    @staticmethod
    def default() -> None:
        return None

    def command(self, path: str) -> str:
        q = shlex.quote(path)
        return f"[ -x {q} ] && {q} --version 2>/dev/null || true"

    def process(self, output: Iterable[str]) -> str | None:
        words = " ".join(output).split()
        return words[1] if len(words) > 1 else None


class Account(FactBase[dict[str, str] | None]):
    """A system account's passwd entry and primary group name, or None when absent.

    One `getent`, where pyinfra's Users fact lists every account with its groups (a third
    of a second on the sandbox).
    """

    @staticmethod
    def default() -> None:
        return None

    def command(self, user: str) -> str:
        q = shlex.quote(user)
        return f"getent passwd {q} && getent group {q} || true"

    def process(self, output: Iterable[str]) -> dict[str, str] | None:
        lines = [line for line in output if line.strip()]
        if len(lines) < 2:
            return None
        name, _, uid, gid, _, home, shell = (lines[0].split(":") + [""] * 7)[:7]
        group, _, group_gid = (lines[1].split(":") + [""] * 3)[:3]
        return {
            "user": name,
            "uid": uid,
            "gid": gid,
            "home": home,
            "shell": shell,
            "group": group,
            "group_gid": group_gid,
        }


class LlmhostUnitStates(FactBase[dict[str, str]]):
    """llmhost's unit files on the guest and whether each is active: {unit: state}."""

    @staticmethod
    def default() -> dict[str, str]:
        return {}

    def command(self) -> str:
        return (
            "for u in $(ls -1 /etc/systemd/system/ 2>/dev/null | "
            "grep -E '^llmhost-.+[.]service$'); do "
            'printf "%s %s\\n" "$u" "$(systemctl is-active "$u")"; done; true'
        )

    def process(self, output: Iterable[str]) -> dict[str, str]:
        return dict(line.split(None, 1) for line in output if len(line.split(None, 1)) == 2)


class PathKind(FactBase[tuple[str, str]]):
    """What is at `path`, not following a link: ("link", its target), ("dir", ""),
    ("file", ""), ("other", "") or ("absent", "")."""

    @staticmethod
    def default() -> tuple[str, str]:
        return ("absent", "")

    def command(self, path: str) -> str:
        q = shlex.quote(path)
        return (
            f"if [ -L {q} ]; then echo link; readlink {q}; elif [ -d {q} ]; then echo dir; "
            f"elif [ -f {q} ]; then echo file; elif [ -e {q} ]; then echo other; "
            "else echo absent; fi"
        )

    def process(self, output: Iterable[str]) -> tuple[str, str]:
        lines = list(output)
        if not lines:
            return ("absent", "")
        return (lines[0].strip(), lines[1] if lines[0].strip() == "link" and len(lines) > 1 else "")


class DirSizes(NamedTuple):
    """FileSizes' answer: the sizes, and what `find` could not read (its own words)."""

    sizes: dict[str, int]
    errors: tuple[str, ...] = ()


class FileSizes(FactBase[DirSizes | None]):
    """{relative path: size} of the files under the directory `path`, through symlinks, its
    top-level `.cache` (hf's bookkeeping) left out, with what `find` could not read (a
    symlink loop, a directory it may not list); None when it is not a directory.

    One `find` for a weights directory of any size (names and sizes, no content read): the
    check of weights already on the box (group_data `existing_weights`) on every run. Its
    errors are lines of the answer, never a failed fact: the caller names the file, the
    field and the path."""

    @staticmethod
    def default() -> None:
        return None

    def command(self, path: str) -> str:
        q = shlex.quote(path)
        # find's errors are captured whole and printed after its output (stdout to fd 3):
        # never mixed into a line of it, and find's exit status fails nothing.
        return (
            f"if [ -d {q} ] && cd {q}; then echo __dir__; "
            "{ errs=$(find -L . -path ./.cache -prune -o -type f -printf '%s\\t%P\\n' "
            "2>&1 >&3); } 3>&1; "
            "[ -z \"$errs\" ] || printf '%s\\n' \"$errs\" | sed 's/^/__error__ /'; "
            "else echo __absent__; fi; true"
        )

    def process(self, output: Iterable[str]) -> DirSizes | None:
        lines = list(output)
        if not lines or lines[0] != "__dir__":
            return None
        sizes = {}
        errors = []
        for line in lines[1:]:
            if line.startswith("__error__ "):
                errors.append(line.removeprefix("__error__ "))
                continue
            size, _, name = line.partition("\t")
            if size.isdigit() and name:
                sizes[name] = int(size)
        return DirSizes(sizes, tuple(errors))
