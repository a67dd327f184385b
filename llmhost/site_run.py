"""`llmhost site INVENTORY [pyinfra options]`: the site in two pyinfra runs, so that a guest
that is down does not fail.

Why: pyinfra connects to every inventory host when a run starts. After a Proxmox host
reboots, its guests may be down (no `onboot`, a start that failed); the guest fails at connect,
before the host step that starts it could run, and `deploys/site.py` ends without it. So:
1. `deploys/host.py` on the Proxmox hosts only: each managed guest set to start at boot, in
   order, and a stopped one started (llmhost/guest_boot.py);
2. every other inventory host reached by ssh is waited for (its sshd answering, bounded);
3. with a router in front of two or more serving guests: a rolling switch of those whose
   served model changes, one replica at a time (llmhost/site_roll.py);
4. `deploys/site.py` on the whole site, with the caller's options: the Proxmox hosts again
   (nothing to do, a few seconds), then the guests.

The caller's pyinfra options go to both runs (connection options, `--data`, `-y`, `--dry`),
except `--limit`, which only the site run gets (the first is limited to the Proxmox hosts).
Exit status: the first run's when it failed (then the site run is not started: its guests
would converge on a host that is not); 1 when a roll stopped (the site run is not started
either: it would switch the replicas the roll did not reach all at once); else the site
run's; 130 on Ctrl-C. The wait is a TCP
connection that gets sshd's banner: a guest reached through a jump host is not waited for.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llmhost.wait import until

REPO = Path(__file__).resolve().parent.parent
DEPLOYS = REPO / "deploys"
PROXMOX_GROUP = "proxmox_hosts"
GUEST_UP_TIMEOUT_S = 300


def say(message: str) -> None:
    """Flushed at once: the pyinfra runs write to the same stream in between."""
    print(message, flush=True)


@dataclass(frozen=True)
class Target:
    name: str
    address: str
    port: int


def inventory_hosts(inventory: str) -> tuple[list[str], list[Target]]:
    """(Proxmox host names, every other ssh target) of a pyinfra inventory file."""
    from llmhost.groups import scrape_address
    from llmhost.inventory import load_inventory

    inv = load_inventory(inventory)
    proxmox = [h.name for h in inv if PROXMOX_GROUP in h.groups]
    others = [
        Target(h.name, scrape_address(h), int(h.data.get("ssh_port") or 22))
        for h in inv
        if PROXMOX_GROUP not in h.groups and not h.name.startswith("@")
    ]
    return proxmox, others


def ssh_answers(target: Target, timeout_s: float = 3) -> bool:
    """sshd accepts and sends its banner: booted far enough for pyinfra to connect."""
    try:
        with socket.create_connection((target.address, target.port), timeout=timeout_s) as sock:
            sock.settimeout(timeout_s)
            return sock.recv(4).startswith(b"SSH-")
    except OSError:
        return False


def wait_for_guests(
    targets: Sequence[Target],
    timeout_s: float = GUEST_UP_TIMEOUT_S,
    log: Callable[[str], None] = say,
) -> list[Target]:
    """Wait until each target's sshd answers; those that never did (the site run fails them)."""
    waiting = list(targets)
    rounds = 0

    def all_answer() -> bool:
        nonlocal rounds
        answered = [t for t in waiting if ssh_answers(t)]
        for target in answered:
            if rounds:
                log(f"    {target.name} answers")
            waiting.remove(target)
        if waiting and not rounds:
            names = ", ".join(t.name for t in waiting)
            log(f"--> waiting for {names} (ssh), up to {timeout_s:.0f} s")
        rounds += 1
        return not waiting

    until(all_answer, timeout_s, every_s=2)
    return waiting


def first_run_args(args: Sequence[str]) -> list[str]:
    """The caller's options without --limit (and its value): the first run has its own."""
    kept: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
        elif arg == "--limit":
            skip = True
        elif not arg.startswith("--limit="):
            kept.append(arg)
    return kept


def pyinfra_argv(*args: str) -> list[str]:
    return [str(Path(sys.executable).with_name("pyinfra")), *args]


def run_child(argv: list[str], grace_s: float = 30) -> int:
    """A pyinfra run in the foreground. On Ctrl-C the child got the SIGINT too: it is given
    grace_s to clean up (llmhost.interrupt ends what it started on the hosts), then killed."""
    child = subprocess.Popen(argv)
    try:
        return child.wait()
    except KeyboardInterrupt:
        try:
            child.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
        raise


def indented(text: str) -> str:
    return "\n".join(f"    {line}" for line in text.splitlines())


def first_line(exc: BaseException) -> str:
    """An exception's first line; its type where str() itself fails (pyinfra's wrapped ones)."""
    try:
        text = str(exc).strip()
    except Exception:  # noqa: BLE001 - a broken __str__ must not hide the run
        text = ""
    return (text.splitlines() or [type(exc).__name__])[0][:200]


def has_option(args: Sequence[str], *names: str) -> bool:
    return any(a in names or a.split("=", 1)[0] in names for a in args)


def roll_first(inventory: str, args: Sequence[str], log: Callable[[str], None] = say) -> int:
    """The rolling switch of every router's replicas that are behind; 0 when done or none
    is needed, 1 when a roll stopped (its report printed). Ctrl-C propagates."""
    from llmhost.fleet.router_api import RouterError
    from llmhost.inventory import load_inventory
    from llmhost.site_roll import fleet_rolls, override_data

    if has_option(args, "--limit"):
        return 0  # the caller chose the hosts: each limited guest switches as a single box
    try:
        fleets = fleet_rolls(load_inventory(inventory, override_data(args)))
    except Exception as exc:  # noqa: BLE001 - bad data: the site run refuses it per host
        # The site run judges the same data before its first operation (every host's
        # group_data, its secrets): data that stops the roll here stops it there too.
        log(f"    no roll: the fleet could not be read ({first_line(exc)})")
        return 0
    for fleet in fleets:
        try:
            code = roll_one(fleet, inventory, args, log)
        except (RouterError, RuntimeError, OSError, ValueError, TypeError) as exc:
            # A router or a replica that could not be read or told (ssh, HTTP, a bad record).
            why = first_line(exc)
            log(f"llmhost site: the roll behind {fleet.router_name} stopped: {why}; no site run")
            return 1
        except subprocess.SubprocessError as exc:
            log(f"llmhost site: the roll behind {fleet.router_name} stopped: {exc}; no site run")
            return 1
        if code:
            return code
    return 0


def roll_one(fleet: Any, inventory: str, args: Sequence[str], log: Callable[[str], None]) -> int:
    """One router's roll: 0 when done, skipped or not needed, 1 when it stopped."""
    from llmhost.fleet.roll import RollStopped
    from llmhost.site_roll import describe, roll_fleet, router_answers

    if not router_answers(fleet):
        log(
            f"    {fleet.router_name}: the router does not answer (a first deploy?): no roll; "
            "the site run converges its replicas side by side"
        )
        return 0
    if has_option(args, "--dry"):
        log(f"--> the roll (--dry: nothing done): {describe(fleet)}")
        return 0

    def switch(name: str) -> int:
        log(f"--> {name}: its own site run (the single box's switch, proofs, rollback)")
        site = str(DEPLOYS / "site.py")
        return run_child(pyinfra_argv(*first_run_args(args), inventory, site, "--limit", name))

    try:
        report = roll_fleet(fleet, switch, log)
    except RollStopped as stop:
        log(indented(stop.report.text()))
        log(f"llmhost site: the roll behind {fleet.router_name} stopped; no site run")
        return 1
    if report is not None:
        log(indented(report.text()))
    return 0


def run_site(inventory: str, args: Sequence[str], log: Callable[[str], None] = say) -> int:
    for deploy in ("host.py", "site.py"):
        if not (DEPLOYS / deploy).is_file():
            log(f"llmhost site: {DEPLOYS / deploy} is missing (run from a checkout)")
            return 2
    try:
        proxmox, others = inventory_hosts(inventory)
        if proxmox:
            log(f"--> Proxmox hosts first, their guests started: {', '.join(proxmox)}")
            first = run_child(
                pyinfra_argv(
                    *first_run_args(args),
                    inventory,
                    str(DEPLOYS / "host.py"),
                    "--limit",
                    PROXMOX_GROUP,
                )
            )
            if first != 0:
                log(f"llmhost site: the Proxmox host run failed (exit {first})")
                return first
            down = wait_for_guests(others, log=log)
            if down:
                names = ", ".join(t.name for t in down)
                log(f"llmhost site: still not answering on ssh: {names}; the site run fails them")
        rolled = roll_first(inventory, args, log)
        if rolled != 0:
            return rolled
        log("--> the site")
        return run_child(pyinfra_argv(*args, inventory, str(DEPLOYS / "site.py")))
    except KeyboardInterrupt:
        log("llmhost site: interrupted")
        return 130
