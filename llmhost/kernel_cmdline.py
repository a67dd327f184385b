"""Kernel command lines as parameter lists: edit one parameter without disturbing others.

Proxmox keeps the line in /etc/kernel/cmdline (systemd-boot, `proxmox-boot-tool refresh`)
or in GRUB_CMDLINE_LINUX_DEFAULT of /etc/default/grub (`update-grub`). The file is what
the next boot uses; /proc/cmdline is what this boot used. Both are compared: the file
decides a change, /proc/cmdline decides "reboot required".
"""

from __future__ import annotations

import re
import shlex

GRUB_KEY = "GRUB_CMDLINE_LINUX_DEFAULT"


def param_name(param: str) -> str:
    return param.split("=", 1)[0]


def parse_params(line: str) -> list[str]:
    return line.split()


def edit_params(current: list[str], present: list[str], absent: list[str]) -> list[str]:
    """Remove `absent` (a bare name removes every value of it, name=value only that one),
    then set each of `present` in place of the same name, or append it. Order of untouched
    parameters is kept, so an unrelated `root=` or `quiet` never moves."""
    result = []
    for param in current:
        if any(param == a or (("=" not in a) and param_name(param) == a) for a in absent):
            continue
        result.append(param)
    for param in present:
        name = param_name(param)
        same = [i for i, p in enumerate(result) if param_name(p) == name]
        if same:
            result[same[0]] = param
            for i in reversed(same[1:]):
                del result[i]
        else:
            result.append(param)
    return result


def grub_params(grub_text: str) -> list[str] | None:
    """The parameters of GRUB_CMDLINE_LINUX_DEFAULT (last assignment wins), None if unset."""
    found = None
    for line in grub_text.splitlines():
        m = re.match(rf"^\s*{GRUB_KEY}=(.*)$", line)
        if m:
            found = parse_params(" ".join(shlex.split(m.group(1))))
    return found


def set_grub_params(grub_text: str, params: list[str]) -> str:
    new = f'{GRUB_KEY}="{" ".join(params)}"'
    lines = grub_text.splitlines()
    indexes = [i for i, line in enumerate(lines) if re.match(rf"^\s*{GRUB_KEY}=", line)]
    if indexes:
        lines[indexes[-1]] = new
    else:
        lines.append(new)
    return "\n".join(lines) + "\n"


def reboot_needed(running: list[str], present: list[str], absent: list[str]) -> list[str]:
    """What this boot lacks or still has, compared with the wanted set; empty when none."""
    problems = [f"missing {p}" for p in present if p not in running]
    for a in absent:
        if "=" in a:
            if a in running:
                problems.append(f"still has {a}")
        else:
            problems += [f"still has {p}" for p in running if param_name(p) == a]
    return problems
