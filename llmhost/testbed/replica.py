"""The sandbox fleet's second serving guest: a copy of the first container (make fleet-up).

Why a copy: a fresh guest would take the first deploy's ~10 minutes (debootstrap, the vLLM
venv, the tiny model); copying the first guest's root filesystem while it serves takes about
a minute, and its venv, weights and model units come with it. The copy gets its own name,
address, MAC and machine id; its model units are not enabled, so it serves only once the site
run has converged it with its own data (inventory/sandbox.py adds it to the site while it
exists, behind the same router, and the stand-in lists it as its LXC guest 202, so that the
host step starts it when it is down). `make fleet-down` (and `make sandbox-down`) destroy it;
the sandbox site is then one guest again.

Why each guest gets a core of its own (a cpuset: the first guest core 0, the copy core 1):
with the group scheduling of per-container cgroups, a task of one container on a core where
another container's engine computes gets the weight its container has on that core, which
follows its container's load there: next to nothing, when that container's own engine is busy
on the other core. Seen here (kernel 6.18): the first guest's API server, pinned to core 1
beside the copy's engine, ran 0.15 ms in 5 s while runnable; its SIGTERM went unanswered
until systemd killed it 150 s later, and the next start took minutes. So no core is shared
across the two guests: each guest's front end runs on its engine's core (inventory/sandbox.py
leaves `frontend_cpus` unset while the copy exists), slower, but never starved.
"""

from __future__ import annotations

import secrets
import shutil
import time
from pathlib import Path

from llmhost.testbed import standin
from llmhost.testbed.sandbox import (
    BRIDGE,
    BRIDGE_IP,
    CONTAINER,
    PREFIX,
    REPLICA_CONTAINER,
    REPLICA_IP,
    STATE_DIR,
    SandboxError,
    _run,
    authorize_key,
    container_exists,
    container_running,
    log,
    wait_booted,
    wait_ssh,
)

LXC = Path("/var/lib/lxc")
CPUSETS_AT_START = "1"  # the copy's core, from its first boot
# Left out of the copy: the running system's own state, and what identifies the first guest.
EXCLUDES = ("/proc/*", "/sys/*", "/dev/*", "/run/*", "/tmp/*", "/var/log/journal/*")


def config_text(name: str, ip: str) -> str:
    mac = "00:16:3e:" + ":".join(f"{b:02x}" for b in secrets.token_bytes(3))
    return (
        "lxc.net.0.type = veth\n"
        f"lxc.net.0.hwaddr = {mac}\n"
        f"lxc.net.0.link = {BRIDGE}\n"
        "lxc.net.0.flags = up\n"
        f"lxc.net.0.ipv4.address = {ip}/{PREFIX}\n"
        f"lxc.net.0.ipv4.gateway = {BRIDGE_IP}\n"
        "lxc.apparmor.profile = unconfined\n"
        f"lxc.rootfs.path = dir:{LXC / name / 'rootfs'}\n"
        "lxc.include = /usr/share/lxc/config/debian.common.conf\n"
        "lxc.tty.max = 4\n"
        f"lxc.uts.name = {name}\n"
        f"lxc.cgroup.cpuset.cpus = {CPUSETS_AT_START}\n"
        "lxc.arch = amd64\n"
        "lxc.pty.max = 1024\n"
    )


def copy_guest(
    source: str = CONTAINER, name: str = REPLICA_CONTAINER, ip: str = REPLICA_IP
) -> None:
    if not container_exists(source):
        raise SandboxError(f"no {source} to copy: run `make site` first (the first guest)")
    if shutil.which("rsync") is None:
        raise SandboxError("rsync is missing: run `make deps` first")
    t0 = time.monotonic()
    log(f"copying {source} to {name} (its root filesystem, ~1 minute)")
    rootfs = LXC / name / "rootfs"
    rootfs.mkdir(parents=True, exist_ok=True)
    excludes = [f"--exclude={e}" for e in EXCLUDES]
    _run(
        [
            "rsync",
            "-aHAX",
            "--numeric-ids",
            "--delete",
            *excludes,
            f"{LXC / source}/rootfs/",
            f"{rootfs}/",
        ]
    )
    (rootfs / "etc/hostname").write_text(name + "\n")
    # Its own name resolves locally: vLLM's gloo group looks it up, and with no DNS on the
    # bridge each lookup of an unknown name waits out its timeouts (2.4 minutes a start).
    hosts = rootfs / "etc/hosts"
    hosts.write_text(
        "\n".join(
            f"127.0.1.1   {name}" if line.startswith("127.0.1.1") else line
            for line in hosts.read_text().splitlines()
        )
        + "\n"
    )
    (rootfs / "etc/machine-id").write_text("")  # a new one at its first boot
    # Its model units start only when the site run converges it with its own data (its cores).
    wants = rootfs / "etc/systemd/system/multi-user.target.wants"
    for link in wants.glob("llmhost-*.service"):
        link.unlink()
    (LXC / name / "config").write_text(config_text(name, ip))
    log(f"{name} copied in {time.monotonic() - t0:.0f} s")


# A core per guest while the fleet exists (see above); the first guest gets both back after.
CPUSETS = {CONTAINER: "0", REPLICA_CONTAINER: "1"}
ALL_CPUS = "0-1"


def set_cpus(name: str, cpus: str) -> None:
    """The container's cpuset, changed live (its tasks move with it)."""
    _run(["lxc-cgroup", "-n", name, "cpuset.cpus", cpus])


def up() -> str:
    """The replica exists, runs and answers ssh, each guest on a core of its own; its address."""
    key = STATE_DIR / "id_ed25519"
    if not container_exists(CONTAINER) or not key.exists():
        raise SandboxError("no sandbox guest: run `make site` first")
    if not container_exists(REPLICA_CONTAINER):
        copy_guest()
    authorize_key(key, name=REPLICA_CONTAINER)
    if not container_running(REPLICA_CONTAINER):
        _run(["lxc-start", "-n", REPLICA_CONTAINER, "-d"])
        log(f"{REPLICA_CONTAINER} started")
    for name, cpus in CPUSETS.items():
        set_cpus(name, cpus)
    wait_booted(name=REPLICA_CONTAINER)
    wait_ssh(key, ip=REPLICA_IP)
    standin.replica_guest(True)  # the stand-in's LXC 202: its host step starts it when down
    log(f"replica {REPLICA_CONTAINER} ready at {REPLICA_IP}")
    return REPLICA_IP


def down() -> None:
    standin.replica_guest(False)
    if container_exists(REPLICA_CONTAINER):
        _run(["lxc-stop", "-n", REPLICA_CONTAINER, "-k"], check=False)
        _run(["lxc-destroy", "-n", REPLICA_CONTAINER])
        log(f"destroyed {REPLICA_CONTAINER}")
    if container_running(CONTAINER):
        set_cpus(CONTAINER, ALL_CPUS)


def exists() -> bool:
    return container_exists(REPLICA_CONTAINER)
