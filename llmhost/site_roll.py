"""The rolling switch wired to a site: from the inventory to a Roll over real replicas.

Why here, on the control machine, and not in a pyinfra operation: a roll orders hosts (one
replica at a time, the router told between them), and pyinfra runs its hosts side by side.
So `llmhost site` rolls before its site run: for each router whose workers (two or more)
do not all serve their target yet, one replica at a time is taken out of the router, drained,
switched by `deploys/site.py --limit <replica>` (the single box's staging, proofs and
rollback, unchanged), and put back once it serves; then the site run converges everything
else and finds the replicas done. A roll is skipped (the site run then does what it always
did) on a first deploy (the router does not answer yet), under `--dry` (it only says what it
would do) and under `--limit` (the caller chose the hosts).

What a replica serves is its serving record (read over ssh, as the state document reads it):
a replica whose switch was interrupted is "pending", not on target, whatever it answers.
"""

from __future__ import annotations

import shlex
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import requests
from pydantic import SecretStr

from llmhost.config.guest import GuestConfig
from llmhost.config.loading import load_guest, load_router
from llmhost.fleet.drain import Drained, wait_drained
from llmhost.fleet.roll import Replica, ReplicaSteps, Roll, RollReport
from llmhost.fleet.router_api import RouterControl, RouterError
from llmhost.groups import is_router_host, is_serving_guest, scrape_address
from llmhost.monitoring import host_port
from llmhost.naming import serving_record
from llmhost.proofs.readiness import auth_headers, probe_once
from llmhost.secrets import resolve_secrets
from llmhost.switch.plan import ServingRecord

SSH_TIMEOUT_S = 20


class SwitchRunFailed(Exception):  # noqa: N818 - reads as what happened
    """A replica's own site run failed; its output above says why."""


def override_data(args: Sequence[str]) -> dict[str, Any]:
    """The caller's `--data key=value` options, parsed as pyinfra parses them."""
    from pyinfra_cli.util import parse_cli_arg

    pairs: list[str] = []
    it = iter(args)
    for arg in it:
        if arg == "--data":
            pairs.append(next(it, ""))
        elif arg.startswith("--data="):
            pairs.append(arg.removeprefix("--data="))
    data: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if sep:
            data[key] = parse_cli_arg(value)
    return data


def ssh_argv(host: Any) -> list[str]:
    """openssh to a host with the connection data pyinfra would use for it."""
    data = host.data
    argv = ["ssh", "-o", "BatchMode=yes", "-o", f"ConnectTimeout={SSH_TIMEOUT_S}"]
    if data.get("ssh_port"):
        argv += ["-p", str(data.get("ssh_port"))]
    if data.get("ssh_key"):
        argv += ["-i", str(data.get("ssh_key"))]
    if data.get("ssh_strict_host_key_checking"):
        argv += ["-o", f"StrictHostKeyChecking={data.get('ssh_strict_host_key_checking')}"]
    if data.get("ssh_known_hosts_file"):
        argv += ["-o", f"UserKnownHostsFile={data.get('ssh_known_hosts_file')}"]
    argv += ["-o", "LogLevel=ERROR"]
    user = data.get("ssh_user")
    address = scrape_address(host)
    return [*argv, f"{user}@{address}" if user else address]


@dataclass
class Member:
    """One replica with what the roll needs to judge and reach it."""

    replica: Replica
    guest: GuestConfig
    ssh: list[str]
    api_key: SecretStr | None

    @property
    def target(self) -> str:
        return self.guest.served_model

    def record(self) -> ServingRecord:
        path = serving_record(self.guest.root_dir)
        proc = subprocess.run(
            [*self.ssh, f"cat {shlex.quote(path)} 2>/dev/null || true"],
            capture_output=True,
            text=True,
            timeout=SSH_TIMEOUT_S + 10,
        )
        if proc.returncode != 0:
            raise RuntimeError(
                f"{self.replica.name}: its serving record could not be read over ssh: "
                f"{proc.stderr.strip()[:200]}"
            )
        return ServingRecord.parse(proc.stdout)

    def on_target(self) -> bool:
        record = self.record()
        return record.current == self.target and record.pending is None

    def served_name(self) -> str | None:
        """The name its server answers to first (the served model's), or None."""
        try:
            listing = requests.get(
                f"{self.replica.worker_url}/v1/models",
                headers=auth_headers(self.api_key),
                timeout=10,
            )
            return str(listing.json()["data"][0]["id"])
        except (requests.RequestException, ValueError, KeyError, IndexError, TypeError):
            return None

    def serves(self) -> bool:
        """/health, /v1/models and a real completion, on whatever model it serves now, and no
        switch in flight (one interrupted before its proofs serves a model not yet proven)."""
        name = self.served_name()
        if name is None or self.record().pending is not None:
            return False
        return probe_once(self.replica.worker_url, name, headers=auth_headers(self.api_key)).ready

    def drain(self) -> Drained:
        try:
            requests.get(f"{self.replica.worker_url}/health", timeout=10)
        except requests.ConnectionError:
            return Drained(True, 0, 0.0)  # nothing listens: nothing can be in flight
        except requests.RequestException:
            pass  # it answers slowly: its gauges (or the bound) say

        def metrics() -> str:
            reply = requests.get(f"{self.replica.worker_url}/metrics", timeout=10)
            reply.raise_for_status()
            return reply.text

        return wait_drained(metrics, bound_s=max(self.guest.drain_timeout_s, 10))


@dataclass
class FleetRoll:
    """One router's replicas and how to reach the router."""

    router_name: str
    router: RouterControl
    members: list[Member]
    add_timeout_s: float

    def behind(self) -> list[Member]:
        """Replicas not on their target model (read from their records)."""
        return [m for m in self.members if not m.on_target()]


def router_base_url(router_host: Any, listen_address: str, port: int) -> str:
    address = scrape_address(router_host) if listen_address in ("0.0.0.0", "::") else listen_address
    return f"http://{host_port(address, port)}"


def fleet_rolls(inventory: Any) -> list[FleetRoll]:
    """Every router of the inventory with two or more workers, as a FleetRoll."""
    from llmhost.tasks.router import router_workers  # pyinfra's deploy API: import on use

    guests = {h.name: h for h in inventory if is_serving_guest(h)}
    rolls = []
    for host in inventory:
        if not is_router_host(host):
            continue
        cfg = load_router(host)
        workers = router_workers(cfg, inventory, {})
        if len(workers) < 2:
            continue
        members = []
        for worker in workers:
            guest_host = guests[worker.name]
            guest = load_guest(guest_host)
            members.append(
                Member(
                    Replica(worker.name, worker.url),
                    guest,
                    ssh_argv(guest_host),
                    resolve_secrets(guest).api_key,
                )
            )
        url = router_base_url(host, cfg.router.listen_address, cfg.router.port)
        rolls.append(
            FleetRoll(host.name, RouterControl(url), members, cfg.router.worker_startup_timeout_s)
        )
    return rolls


def roll_steps(members: Sequence[Member], switch: Callable[[str], int]) -> ReplicaSteps:
    by_name = {m.replica.name: m for m in members}

    def run_switch(replica: Replica) -> None:
        rc = switch(replica.name)
        if rc == 0:
            return
        if rc == 130:
            # Ctrl-C reached the replica's run (its process group's); whether or not it also
            # reached us, the roll stops as interrupted: the replica stays out and is named.
            raise KeyboardInterrupt
        try:
            record = by_name[replica.name].record()
            serving = f"its record: {record.current or 'nothing'} serves"
            if record.failed:
                serving += f", the switch to {record.failed.get('model')} failed and rolled back"
        except Exception:  # noqa: BLE001 - the exit status is the finding; the record a detail
            serving = "its record could not be read"
        raise SwitchRunFailed(f"its site run failed, exit {rc}, lines above; {serving}")

    return ReplicaSteps(
        on_target=lambda r: by_name[r.name].on_target(),
        serves=lambda r: by_name[r.name].serves(),
        drain=lambda r: by_name[r.name].drain(),
        switch=run_switch,
    )


def roll_fleet(
    fleet: FleetRoll, switch: Callable[[str], int], log: Callable[[str], None]
) -> RollReport | None:
    """The roll of one router's replicas; None when every replica is on target already.
    RollStopped (with its report) when a replica failed; KeyboardInterrupt on Ctrl-C."""
    roll = Roll(
        [m.replica for m in fleet.members],
        fleet.router,
        roll_steps(fleet.members, switch),
        add_timeout_s=fleet.add_timeout_s,
        log=lambda line: log(f"    {line}"),
    )
    behind = fleet.behind()
    if not behind:
        # No roll, but a replica an earlier roll left out still goes back (a roll does it first).
        roll.add_back_the_left_out()
        log(f"    {fleet.router_name}: every replica serves its target model: no roll")
        return None
    names = ", ".join(f"{m.replica.name} ({m.target})" for m in behind)
    log(f"--> rolling switch behind router {fleet.router_name}, one replica at a time: {names}")
    return roll.run()


def describe(fleet: FleetRoll) -> str:
    """What a roll would do (for --dry): who is behind, from their records."""
    behind = fleet.behind()
    if not behind:
        return f"{fleet.router_name}: every replica serves its target model: no roll"
    names = ", ".join(m.replica.name for m in behind)
    return f"{fleet.router_name}: would roll, one replica at a time: {names}"


def router_answers(fleet: FleetRoll) -> bool:
    try:
        fleet.router.workers()
    except RouterError:
        return False
    return True
