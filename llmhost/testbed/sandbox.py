"""The embedded default target: a Debian 12 LXC system container on a private bridge.

It stands in for a Proxmox LXC serving guest on machines without Proxmox or GPUs. The
guest has no NAT: it reaches packages only through caching proxies started here on the
bridge address (apt-cacher-ng for apt, proxpi for PyPI, a static file server for local
wheels) -- the same path an air-gapped site uses. Works where PID 1 is not systemd: every
daemon is started by this module and tracked by PID file.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from llmhost.wait import until

# The checkout this test bed belongs to: its state, logs and keys live in <repo>/.sandbox.
REPO_ROOT = Path(__file__).resolve().parents[2]
STATE_DIR = Path(os.environ.get("LLMHOST_SANDBOX_DIR", REPO_ROOT / ".sandbox"))
STATE_FILE = STATE_DIR / "state.json"
# The sandbox site's vLLM API key (0600): inventory/sandbox.py names this file in group_data.
API_KEY_FILE = STATE_DIR / "api-key"

CONTAINER = os.environ.get("LLMHOST_SANDBOX_NAME", "llmhost-sbx")
BRIDGE = "llmhbr0"
BRIDGE_IP = "10.99.0.1"
GUEST_IP = "10.99.0.12"
STANDIN_IP = "10.99.0.13"  # llmhost/standin.py: a container standing in for a Proxmox host
# The sandbox fleet's second serving guest, a copy of the first (llmhost/testbed/replica.py).
REPLICA_CONTAINER = f"{CONTAINER}-2"
REPLICA_IP = "10.99.0.14"
SSH_HOSTS = {"sandbox": GUEST_IP, "standin": STANDIN_IP, "replica": REPLICA_IP}
PREFIX = 24
APT_PROXY_PORT = 3142
PYPI_PROXY_PORT = 5000
WHEELS_PORT = 8089
DEBIAN_SOURCES = Path("/etc/apt/sources.list.d/debian.sources")
DEFAULT_MIRROR = "http://deb.debian.org/debian"
GUEST_PACKAGES = "python3,openssh-server,ca-certificates"


class SandboxError(RuntimeError):
    """A sandbox step failed; the message says which and how to fix it."""


@dataclass(frozen=True)
class SandboxState:
    """What inventory/sandbox.py needs to reach the guest and its package proxies."""

    name: str
    ip: str
    ssh_user: str
    ssh_key: str
    apt_proxy: str
    pypi_index: str
    find_links: list[str]


def log(msg: str) -> None:
    print(f"[sandbox] {msg}", flush=True)


def _run(cmd: list[str], check: bool = True, **kw) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, text=True, capture_output=True, **kw)
    if check and proc.returncode != 0:
        raise SandboxError(f"`{' '.join(cmd)}` failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc


def debian_mirrors() -> tuple[str, str]:
    """The host's Debian and security mirror URLs, so the guest uses the same ones."""
    main, security = DEFAULT_MIRROR, "http://deb.debian.org/debian-security"
    if DEBIAN_SOURCES.exists():
        for line in DEBIAN_SOURCES.read_text().splitlines():
            if line.startswith("URIs:"):
                uri = line.split(None, 1)[1].strip()
                if uri.rstrip("/").endswith("-security"):
                    security = uri
                else:
                    main = uri
    return main, security


# --- daemons -------------------------------------------------------------------------------


def _pid_alive(pidfile: Path) -> int | None:
    try:
        pid = int(pidfile.read_text().strip())
    except (OSError, ValueError):
        return None
    try:
        os.kill(pid, 0)
    except OSError:
        return None
    return pid


def _spawn(name: str, cmd: list[str], env: dict[str, str] | None = None) -> None:
    pidfile = STATE_DIR / f"{name}.pid"
    if _pid_alive(pidfile):
        log(f"{name} already running")
        return
    logfile = open(STATE_DIR / f"{name}.log", "ab")  # noqa: SIM115 - handed to the daemon
    proc = subprocess.Popen(
        cmd,
        stdout=logfile,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
        env={**os.environ, **(env or {})},
    )
    pidfile.write_text(str(proc.pid))
    log(f"started {name} (pid {proc.pid})")


def _stop(name: str) -> None:
    pidfile = STATE_DIR / f"{name}.pid"
    pid = _pid_alive(pidfile)
    if pid:
        os.kill(pid, signal.SIGTERM)
        log(f"stopped {name} (pid {pid})")
    pidfile.unlink(missing_ok=True)


def _check_alive(name: str) -> None:
    """A daemon that died at once (port taken by a stale copy, bad config) is an error."""
    time.sleep(0.5)
    if not _pid_alive(STATE_DIR / f"{name}.pid"):
        tail = (STATE_DIR / f"{name}.log").read_text(errors="replace")[-800:]
        raise SandboxError(f"{name} exited right after start; its log ends:\n{tail}")


def _listens(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex((BRIDGE_IP, port)) == 0


def _wait_port(port: int, timeout: float = 30) -> None:
    if until(lambda: _listens(port), timeout, every_s=0.3):
        return
    raise SandboxError(f"nothing listens on {BRIDGE_IP}:{port} after {timeout}s (see {STATE_DIR})")


def _holder(port: int) -> str:
    """Who listens on the bridge's port, as `ss` names it (pid and command), for the log."""
    out = _run(["ss", "-Hltnp", f"sport = :{port}"], check=False).stdout
    found = re.search(r'\(\("([^"]+)",pid=(\d+)', out)
    return f"pid {found.group(2)}, {found.group(1)}" if found else "a process ss does not name"


def _start_daemon(name: str, cmd: list[str], port: int, env: dict[str, str] | None = None) -> None:
    """One of the sandbox's servers on the bridge, started unless it runs. Where another
    process already serves its port (another checkout's sandbox on this machine: the bridge
    and its ports are the machine's), that one is used, and the log says so; starting a
    second copy would only see it die on the taken port, silently."""
    if not _pid_alive(STATE_DIR / f"{name}.pid") and _listens(port):
        log(f"{name}: {BRIDGE_IP}:{port} is already served ({_holder(port)}): using it")
        return
    _spawn(name, cmd, env=env)
    _wait_port(port)
    _check_alive(name)


def start_apt_proxy() -> None:
    """apt-cacher-ng with a private config whose Debian backend is the host's mirror."""
    acng = shutil.which("apt-cacher-ng") or "/usr/sbin/apt-cacher-ng"
    if not Path(acng).exists():
        raise SandboxError("apt-cacher-ng is not installed: run `make deps` (apt-get install)")
    conf = STATE_DIR / "acng"
    if conf.exists():
        shutil.rmtree(conf)
    shutil.copytree("/etc/apt-cacher-ng", conf)
    main, _ = debian_mirrors()
    # Its default backend list answered 503 here; the host's own mirror is known to work.
    (conf / "backends_debian").write_text(main.rstrip("/") + "/\n")
    cache = STATE_DIR / "acng-cache"
    cache.mkdir(exist_ok=True)
    _start_daemon(
        "apt-cacher-ng",
        [
            acng,
            "-c",
            str(conf),
            "ForeGround=1",
            f"BindAddress={BRIDGE_IP}",
            f"Port={APT_PROXY_PORT}",
            f"CacheDir={cache}",
            f"LogDir={STATE_DIR}",
            f"PidFile={STATE_DIR / 'acng-own.pid'}",
            f"SocketPath={STATE_DIR / 'acng.socket'}",
        ],
        APT_PROXY_PORT,
    )


def start_pypi_proxy() -> None:
    """proxpi, waiting for whole downloads instead of redirecting the guest upstream."""
    cache = STATE_DIR / "proxpi-cache"
    cache.mkdir(exist_ok=True)
    _start_daemon(
        "proxpi",
        [
            sys.executable,
            "-m",
            "flask",
            "--app",
            "proxpi.server",
            "run",
            "--host",
            BRIDGE_IP,
            "--port",
            str(PYPI_PROXY_PORT),
            "--with-threads",
        ],
        PYPI_PROXY_PORT,
        env={
            "PROXPI_CACHE_DIR": str(cache),
            "PROXPI_CACHE_SIZE": str(12 * 1024**3),
            # The guest cannot follow a redirect to the real index: make proxpi wait.
            "PROXPI_DOWNLOAD_TIMEOUT": "1800",
            "PROXPI_READ_TIMEOUT": "120",
        },
    )


def local_wheel_dirs() -> list[Path]:
    """Wheel folders pip is told about here (PIP_FIND_LINKS), e.g. torch 2.13.0+cpu."""
    raw = os.environ.get("PIP_FIND_LINKS", "")
    return [Path(p) for p in raw.split() if p and Path(p).is_dir()]


def start_wheel_server() -> list[str]:
    dirs = local_wheel_dirs()
    if not dirs:
        return []
    _start_daemon(
        "wheels",
        [
            sys.executable,
            "-m",
            "http.server",
            str(WHEELS_PORT),
            "--bind",
            BRIDGE_IP,
            "--directory",
            str(dirs[0]),
        ],
        WHEELS_PORT,
    )
    return [f"http://{BRIDGE_IP}:{WHEELS_PORT}/"]


# --- network and container -----------------------------------------------------------------


def ensure_bridge() -> None:
    if _run(["ip", "link", "show", BRIDGE], check=False).returncode != 0:
        _run(["ip", "link", "add", BRIDGE, "type", "bridge"])
        log(f"created bridge {BRIDGE}")
    addrs = _run(["ip", "-4", "addr", "show", BRIDGE]).stdout
    if f"{BRIDGE_IP}/{PREFIX}" not in addrs:
        _run(["ip", "addr", "add", f"{BRIDGE_IP}/{PREFIX}", "dev", BRIDGE])
    _run(["ip", "link", "set", BRIDGE, "up"])


def container_exists(name: str = CONTAINER) -> bool:
    return Path(f"/var/lib/lxc/{name}/config").exists()


def container_running(name: str = CONTAINER) -> bool:
    out = _run(["lxc-info", "-n", name, "-s"], check=False).stdout
    return "RUNNING" in out


def create_container(key: Path, name: str = CONTAINER, ip: str = GUEST_IP) -> None:
    conf = STATE_DIR / f"lxc-{name}.conf"
    conf.write_text(
        "lxc.net.0.type = veth\n"
        f"lxc.net.0.link = {BRIDGE}\n"
        "lxc.net.0.flags = up\n"
        f"lxc.net.0.ipv4.address = {ip}/{PREFIX}\n"
        f"lxc.net.0.ipv4.gateway = {BRIDGE_IP}\n"
        "lxc.apparmor.profile = unconfined\n"
    )
    main, security = debian_mirrors()
    log("creating the Debian 12 container (debootstrap; ~80 s the first time)")
    t0 = time.monotonic()
    _run(
        [
            "lxc-create",
            "-n",
            name,
            "-t",
            "debian",
            "-f",
            str(conf),
            "--",
            "-r",
            "bookworm",
            f"--mirror={main}",
            f"--security-mirror={security}",
            f"--packages={GUEST_PACKAGES}",
            f"--auth-key={key}.pub",
        ],
        env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
    )
    rootfs = Path(f"/var/lib/lxc/{name}/rootfs")
    # LXC already configures eth0; the template's DHCP stanza only adds a 60 s timeout.
    (rootfs / "etc/network/interfaces").write_text(
        "auto lo\niface lo inet loopback\nauto eth0\niface eth0 inet manual\n"
    )
    # The template writes the pre-bookworm security suite ("bookworm/updates"), which 404s.
    (rootfs / "etc/apt/sources.list").write_text(
        f"deb {main} bookworm main\n"
        f"deb {main} bookworm-updates main\n"
        f"deb {security} bookworm-security main\n"
    )
    log(f"container created in {time.monotonic() - t0:.0f}s")


def authorize_key(key: Path, name: str = CONTAINER) -> None:
    """A guest kept from an earlier checkout still lets this checkout's key in."""
    ssh_dir = Path(f"/var/lib/lxc/{name}/rootfs/root/.ssh")
    ssh_dir.mkdir(mode=0o700, exist_ok=True)
    auth = ssh_dir / "authorized_keys"
    pub = Path(f"{key}.pub").read_text().strip()
    existing = auth.read_text().splitlines() if auth.exists() else []
    if pub not in existing:
        auth.write_text("\n".join([*existing, pub]) + "\n")
        auth.chmod(0o600)


def write_ssh_config(key: Path) -> Path:
    """For ssh, testinfra (--ssh-config) and people: `ssh -F .sandbox/ssh_config sandbox`."""
    path = STATE_DIR / "ssh_config"
    path.write_text(
        "".join(
            f"Host {alias} {ip}\n"
            f"    HostName {ip}\n"
            "    User root\n"
            f"    IdentityFile {key}\n"
            "    StrictHostKeyChecking no\n"
            "    UserKnownHostsFile /dev/null\n"
            "    LogLevel ERROR\n"
            for alias, ip in SSH_HOSTS.items()
        )
    )
    return path


def wait_booted(timeout: float = 120, name: str = CONTAINER) -> None:
    def booted() -> bool:
        command = ["lxc-attach", "-n", name, "--", "systemctl", "is-system-running"]
        return _run(command, check=False).stdout.strip() in ("running", "degraded")

    if until(booted, timeout):
        return
    raise SandboxError(f"{name}: systemd did not reach running within {timeout}s")


def wait_ssh(key: Path, timeout: float = 60, ip: str = GUEST_IP) -> None:
    if until(lambda: _run(ssh_command(key, ip) + ["true"], check=False).returncode == 0, timeout):
        return
    raise SandboxError(f"ssh to root@{ip} failed for {timeout}s")


def ssh_command(key: Path, ip: str = GUEST_IP) -> list[str]:
    return [
        "ssh",
        "-i",
        str(key),
        "-o",
        "StrictHostKeyChecking=no",
        "-o",
        "UserKnownHostsFile=/dev/null",
        "-o",
        "LogLevel=ERROR",
        "-o",
        "BatchMode=yes",
        f"root@{ip}",
    ]


def up() -> SandboxState:
    if os.geteuid() != 0:
        raise SandboxError("the sandbox needs root (lxc-create, bridges)")
    for tool in ("lxc-create", "debootstrap", "ip"):
        if not shutil.which(tool):
            raise SandboxError(f"{tool} is missing: run `make deps` first")
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    key = STATE_DIR / "id_ed25519"
    if not key.exists():
        _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)])
    ensure_api_key()
    ensure_bridge()
    start_apt_proxy()
    start_pypi_proxy()
    find_links = start_wheel_server()
    if not container_exists():
        create_container(key)
    # Every guest kept from an earlier checkout (the fleet's copy too) lets this one's key in:
    # a site run that cannot reach one of its hosts fails for all of them.
    for name in (CONTAINER, REPLICA_CONTAINER):
        if container_exists(name):
            authorize_key(key, name)
    if not container_running():
        _run(["lxc-start", "-n", CONTAINER, "-d"])
        log("container started")
    wait_booted()
    wait_ssh(key)
    state = SandboxState(
        name=CONTAINER,
        ip=GUEST_IP,
        ssh_user="root",
        ssh_key=str(key),
        apt_proxy=f"http://{BRIDGE_IP}:{APT_PROXY_PORT}",
        pypi_index=f"http://{BRIDGE_IP}:{PYPI_PROXY_PORT}/index/",
        find_links=find_links,
    )
    write_ssh_config(key)
    STATE_FILE.write_text(json.dumps(asdict(state), indent=2) + "\n")
    log(f"guest {CONTAINER} ready at {GUEST_IP}; state in {STATE_FILE}")
    return state


def ensure_api_key() -> Path:
    """A random API key for the sandbox site, made once, readable by root only."""
    if not API_KEY_FILE.exists():
        API_KEY_FILE.touch(mode=0o600)
        API_KEY_FILE.write_text(secrets.token_urlsafe(32) + "\n")
    API_KEY_FILE.chmod(0o600)
    return API_KEY_FILE


def api_key() -> str:
    return API_KEY_FILE.read_text().strip()


def containers_on_bridge() -> list[str]:
    """The running containers with a network on the sandbox's bridge (the stand-in's too).
    Asked of LXC (`lxc-info -c`), not read from a config file that may live elsewhere."""
    if shutil.which("lxc-ls") is None:
        return []
    running = _run(["lxc-ls", "--running", "-1"], check=False).stdout.split()
    found = []
    for name in running:
        link = _run(["lxc-info", "-n", name, "-c", "lxc.net.0.link"], check=False).stdout
        if link.partition("=")[2].strip() == BRIDGE:  # "lxc.net.0.link = llmhbr0"
            found.append(name)
    return found


def down() -> None:
    for name in (REPLICA_CONTAINER, CONTAINER):
        if container_exists(name):
            _run(["lxc-stop", "-n", name, "-k"], check=False)
            _run(["lxc-destroy", "-n", name])
            log(f"destroyed {name}")
    for name in ("guest-bridge", "wheels", "proxpi", "apt-cacher-ng"):
        _stop(name)
    # A container left running on a deleted bridge keeps a veth to nowhere: the next
    # `sandbox up` makes a new bridge and `standin up`, finding it running, cannot reach it.
    for name in containers_on_bridge():
        _run(["lxc-stop", "-n", name, "-k"], check=False)
        log(f"stopped {name} (its network is {BRIDGE})")
    if _run(["ip", "link", "show", BRIDGE], check=False).returncode == 0:
        _run(["ip", "link", "del", BRIDGE])
        log(f"removed bridge {BRIDGE}")
    STATE_FILE.unlink(missing_ok=True)


def reboot(name: str = CONTAINER) -> None:
    """Stop and start a container, as a host reboot would (used by the reboot tests)."""
    _run(["lxc-stop", "-n", name])
    _run(["lxc-start", "-n", name, "-d"])
    wait_booted(name=name)


def status() -> dict:
    state = json.loads(STATE_FILE.read_text()) if STATE_FILE.exists() else None
    return {
        "container": CONTAINER,
        "exists": container_exists(),
        "running": container_exists() and container_running(),
        "daemons": {
            n: _pid_alive(STATE_DIR / f"{n}.pid") for n in ("apt-cacher-ng", "proxpi", "wheels")
        },
        "state": state,
    }


def load_state() -> SandboxState:
    if not STATE_FILE.exists():
        raise SandboxError(f"no sandbox state at {STATE_FILE}: run `make sandbox-up` first")
    return SandboxState(**json.loads(STATE_FILE.read_text()))


# On the guest: the serving record without its failed switch (written as the guard writes it:
# a temporary file, then renamed); says what it forgot.
FORGET_FAILED = """\
import json, os, sys
path = sys.argv[1] if len(sys.argv) > 1 else "/opt/llmhost/state/serving.json"
try:
    record = json.load(open(path))
except (OSError, ValueError):
    sys.exit(0)
failed = record.pop("failed", None) if isinstance(record, dict) else None
if failed:
    with open(path + ".tmp", "w") as out:
        json.dump(record, out)
    os.replace(path + ".tmp", path)
    print("forgot the failed switch to %s" % failed.get("model"))
"""


def forget_failed_switch() -> None:
    """`make test` starts from a known guest: a switch that failed before (a user's drill
    after `make demo`) would refuse every later switch to that model ("failed before"), so
    its record is dropped; the model that serves and the units are left to the suite's own
    first deploy."""
    if not STATE_FILE.exists() or not container_running():
        return
    state = load_state()
    proc = subprocess.run(
        [*ssh_command(Path(state.ssh_key)), "python3 -"],
        input=FORGET_FAILED,
        capture_output=True,
        text=True,
        timeout=60,
    )
    if proc.returncode != 0:
        raise SandboxError(f"could not read the guest's serving record: {proc.stderr.strip()}")
    if proc.stdout.strip():
        log(f"guest {state.ip}: {proc.stdout.strip()} (make test starts from a known state)")
