"""A Debian 12 LXC container standing in for a Proxmox host, next to the sandbox guest.

It is not Proxmox: /etc/pve is a plain directory, there is no pct, qm, proxmox-boot-tool or
NVIDIA driver. It holds the files a Proxmox host has (guest configs, /etc/kernel/cmdline,
an fstab with swap) and, under FACT_ROOT, captures of a real GPU host (/proc/devices,
/proc/driver/nvidia/version, /proc/cmdline, /dev/nvidia* names from the H200 box), so
deploys/host.py runs for real against it, unchanged.

The test bed makes the container look like that host from the inside (testbed/shims/):
- `pct`, `qm`, `proxmox-boot-tool`, `update-grub`, `update-initramfs` are small shims in
  /usr/local/sbin that append their argv to COMMAND_LOG and change nothing (tests read it),
  except that `pct|qm set --onboot/--startup` edit the guest's config, and `pct status/start
  201` (and 202, the fleet's second guest, while it exists) read and start the sandbox
  containers themselves, through a loop on this machine (the guest bridge, started by `up`,
  ended by `down`);
- `nvidia-smi` answers from the captures (and fails, as without a driver, while /proc/devices
  lists no nvidia); `nvidia-persistenced` forks an idle process;
- `modprobe`, `modinfo` (for the NVIDIA modules; others go to the real tools) and
  `nvidia-modprobe` "load" the modules and create their nodes from the captures: a loaded
  nvidia puts its majors in /proc/devices and /proc/driver/nvidia (version, its GPU's minor,
  the MIG capability files) in place, nvidia_uvm its major; nvidia-modprobe creates the
  /dev/nvidia* nodes with the majors of /proc/devices;
- at boot, llmhost-standin-hw.service binds the captured /proc/devices, /proc/cmdline and
  /proc/driver over the container's own, loads what /etc/modules-load.d lists and creates
  /dev/nvidia* character devices with the captured majors of the modules loaded, so the
  product's facts read the usual paths.
`reset` puts the seed files back for repeatable tests: the modules loaded (the H200 box as
captured), or not loaded yet, or not even installed (MODULE_STATES).
"""

from __future__ import annotations

import csv
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

from llmhost.testbed import sandbox

NAME = "llmhost-pve"
IP = sandbox.STANDIN_IP
STATE_FILE = sandbox.STATE_DIR / "standin.json"
FACT_ROOT = "/srv/llmhost-standin/h200"
COMMAND_LOG = "/var/log/llmhost/not-executed.log"
CAPTURES = sandbox.REPO_ROOT / "tests" / "fixtures" / "h200"
SHIMS = Path(__file__).resolve().parent / "shims"
RECORDED_COMMANDS = ("pct", "qm", "proxmox-boot-tool", "update-grub", "update-initramfs")
GUEST_TOOLS = ("pct", "qm")  # the proxmox-guest shim: records, and keeps guests' boot state
# The stand-in's LXC guest 201 is the sandbox container, and 202 the fleet's second serving
# guest while it exists (make fleet-up): their `pct status/start` reach them through the guest
# bridge (llmhost/testbed/guest_bridge.py), a loop on this machine.
REPLICA_VMID = 202
BRIDGED_GUESTS = {201: sandbox.CONTAINER, REPLICA_VMID: sandbox.REPLICA_CONTAINER}
BRIDGE_DAEMON = "guest-bridge"
GUESTS_DIR = "/var/lib/llmhost-standin/guests"
# Read by the shims and the hardware unit (besides proc/devices and proc/cmdline), from
# tests/fixtures/h200 and, for the state document's queries, tests/fixtures/h200-report.
CAPTURED_FILES = ("query-gpu-driver.csv", "nvidia-smi-L.txt", "dev-nvidia-nodes.txt")
REPORT_CAPTURES = CAPTURES.parent / "h200-report"
REPORT_FILES = ("gpu-inventory.csv", "compute-apps.csv", "topo-m.txt")
# The GPU metrics timer's two queries, idle and with an orphan holding 8 GiB (H200 captures).
MONITORING_CAPTURES = CAPTURES.parent / "h200-monitoring"
# The NVIDIA modules: "loaded" (the H200 box as captured), "unloaded" (a fresh box: the
# driver installed for the running kernel, its modules not loaded, no /dev/nvidia* node) or
# "absent" (no driver installed: modprobe and modinfo find no nvidia module).
MODULE_STATES = ("loaded", "unloaded", "absent")
NVIDIA_SHIMS = {  # shim -> where it is installed (/usr/local/sbin comes first on PATH)
    "modprobe": "/usr/local/sbin/modprobe",
    "modinfo": "/usr/local/sbin/modinfo",
    "nvidia-modprobe": "/usr/bin/nvidia-modprobe",
}


def lxc_conf(vmid: int, hostname: str, mac: str) -> str:
    """A Proxmox LXC guest's config as a freshly installed host has it (no llmhost keys)."""
    return (
        "arch: amd64\ncores: 32\nfeatures: nesting=1\n"
        f"hostname: {hostname}\nmemory: 262144\n"
        f"net0: name=eth0,bridge=vmbr0,hwaddr={mac},ip=dhcp,type=veth\n"
        f"ostype: debian\nrootfs: local-zfs:subvol-{vmid}-disk-0,size=800G\n"
        "swap: 0\nunprivileged: 0\n"
    )


LXC_201 = lxc_conf(201, "llm-lxc", "BC:24:11:5E:7A:01") + (
    "\n[pre-upgrade]\narch: amd64\nhostname: llm-lxc\nmemory: 131072\n"
    "rootfs: local-zfs:subvol-201-disk-0,size=800G\nsnaptime: 1780000000\n"
)
# The fleet's second guest as the stand-in lists it (replica.py puts it there and takes it
# away): a copy of 201, as the sandbox's replica is a copy of its guest.
LXC_202 = lxc_conf(202, "llm-lxc-2", "BC:24:11:5E:7A:03")
QEMU_301 = """\
bios: ovmf
boot: order=scsi0
cores: 32
machine: q35
memory: 262144
name: llm-vm
net0: virtio=BC:24:11:5E:7A:02,bridge=vmbr0
ostype: l26
scsi0: local-zfs:vm-301-disk-0,size=800G
"""
CMDLINE = "root=ZFS=rpool/ROOT/pve-1 boot=zfs quiet\n"
FSTAB = (
    "# <file system> <mount point> <type> <options> <dump> <pass>\n"
    "proc /proc proc defaults 0 0\n/dev/pve/swap none swap sw 0 0\n"
)
MANAGED = (
    "/etc/sysctl.d/90-llmhost.conf /etc/modules-load.d/llmhost.conf "
    "/etc/modprobe.d/llmhost.conf /etc/udev/rules.d/70-llmhost-nvidia.rules "
    "/etc/apt/preferences.d/llmhost-nvidia-driver /etc/systemd/system/nvidia-persistenced.service "
    "/etc/systemd/system/multi-user.target.wants/nvidia-persistenced.service"
)


def ssh(command: str, check: bool = True) -> str | None:
    """stdout of a command on the stand-in; None when it fails and check is off."""
    key = sandbox.STATE_DIR / "id_ed25519"
    proc = subprocess.run(
        sandbox.ssh_command(key, IP) + [command], text=True, capture_output=True, timeout=120
    )
    if proc.returncode != 0:
        if check:
            raise sandbox.SandboxError(f"stand-in: {command[:80]}... failed: {proc.stderr}")
        return None
    return proc.stdout


def put(path: str, text: str) -> str:
    return f"mkdir -p $(dirname {path}) && printf '%s' {shlex.quote(text)} > {path}"


def install_shims() -> list[str]:
    """Shell steps that put the shims and the hardware unit in place (idempotent)."""
    record = (SHIMS / "record-only").read_text()
    guest_tool = (SHIMS / "proxmox-guest").read_text()
    steps = [
        put(f"/usr/local/sbin/{cmd}", guest_tool if cmd in GUEST_TOOLS else record)
        for cmd in RECORDED_COMMANDS
    ]
    steps += [put(path, (SHIMS / shim).read_text()) for shim, path in NVIDIA_SHIMS.items()]
    steps += [
        put("/usr/local/bin/nvidia-smi", (SHIMS / "nvidia-smi").read_text()),
        put("/usr/bin/nvidia-persistenced", (SHIMS / "nvidia-persistenced").read_text()),
        put("/usr/local/sbin/llmhost-standin-hw", (SHIMS / "llmhost-standin-hw").read_text()),
        put(
            "/etc/systemd/system/llmhost-standin-hw.service",
            (SHIMS / "llmhost-standin-hw.service").read_text(),
        ),
        "chmod 755 /usr/local/bin/nvidia-smi /usr/bin/nvidia-persistenced "
        "/usr/local/sbin/llmhost-standin-hw "
        + " ".join(f"/usr/local/sbin/{cmd}" for cmd in RECORDED_COMMANDS)
        + " "
        + " ".join(NVIDIA_SHIMS.values()),
    ]
    return steps


def without_nvidia(proc_devices: str) -> str:
    """/proc/devices as it reads before the NVIDIA modules are loaded: no nvidia* major."""
    return "".join(
        line
        for line in proc_devices.splitlines(keepends=True)
        if not re.match(r"^\s*\d+\s+nvidia", line)
    )


def nvidia_module_files() -> dict[str, str]:
    """What /proc/driver/nvidia holds on the H200 box with the module loaded, by path under
    it: the captured version file; from the captured nvidia-smi query, each GPU's information
    (its "Device Minor" is its /dev/nvidia<N>: nvidia0 on that box); the MIG capability files
    nvidia-modprobe -f reads (minors 1 and 2, modes 0400 and 0444, as /dev/nvidia-caps had)."""
    files = {"version": (CAPTURES / "proc-driver-nvidia-version.txt").read_text()}
    rows = list(csv.reader((CAPTURES / "query-gpu-driver.csv").read_text().splitlines()[1:]))
    for minor, row in enumerate(rows):
        name, bus = row[1].strip(), row[3].strip()
        bus = bus[4:] if len(bus.split(":")[0]) == 8 else bus  # 00000000:00:06.0 -> 0000:...
        files[f"gpus/{bus}/information"] = (
            f"Model: \t\t {name}\nBus Location: \t {bus}\nDevice Minor: \t {minor}\n"
        )
    for cap, minor, mode in (("config", 1, 256), ("monitor", 2, 292)):
        files[f"capabilities/mig/{cap}"] = (
            f"DeviceFileMinor: {minor}\nDeviceFileMode: {mode}\nDeviceFileModify: 1\n"
        )
    return files


def module_state_steps(modules: str) -> list[str]:
    """Shell steps that write the captures for a module state (MODULE_STATES): what
    /proc/devices and /proc/driver show, and whether the driver is installed."""
    if modules not in MODULE_STATES:
        raise ValueError(f"modules: {modules!r} is not one of {MODULE_STATES}")
    devices = (CAPTURES / "proc-devices.txt").read_text()
    steps = [
        put(f"{FACT_ROOT}/proc/devices.loaded", devices),
        put(
            f"{FACT_ROOT}/proc/devices", devices if modules == "loaded" else without_nvidia(devices)
        ),
        f"mkdir -p {FACT_ROOT}/proc/driver",
    ]
    if modules != "absent":
        steps += [
            put(f"{FACT_ROOT}/nvidia-module/{path}", text)
            for path, text in nvidia_module_files().items()
        ]
    if modules == "loaded":
        steps.append(f"cp -r {FACT_ROOT}/nvidia-module {FACT_ROOT}/proc/driver/nvidia")
    return steps


def reset(modules: str = "loaded") -> None:
    """The stand-in's files as a freshly installed Proxmox host with 1 GPU would have them;
    its NVIDIA modules loaded, or not yet, or not even installed (MODULE_STATES)."""
    script = [
        "systemctl stop nvidia-persistenced.service 2>/dev/null || true",
        f"rm -rf /etc/pve {FACT_ROOT} {COMMAND_LOG} {MANAGED} {GUESTS_DIR}/*.state",
        *install_shims(),
        put("/etc/pve/lxc/201.conf", LXC_201),
        replica_guest_step(sandbox.container_exists(sandbox.REPLICA_CONTAINER)),
        put("/etc/pve/qemu-server/301.conf", QEMU_301),
        put("/etc/kernel/cmdline", CMDLINE),
        put("/etc/kernel/proxmox-boot-uuids", "5A1B-2C3D\n"),
        put("/etc/fstab", FSTAB),
        *module_state_steps(modules),
        put(f"{FACT_ROOT}/proc/cmdline", (CAPTURES / "proc-cmdline.txt").read_text()),
    ]
    script += [put(f"{FACT_ROOT}/{name}", (CAPTURES / name).read_text()) for name in CAPTURED_FILES]
    script += [
        put(f"{FACT_ROOT}/{name}", (REPORT_CAPTURES / name).read_text()) for name in REPORT_FILES
    ]
    script += gpu_state_steps("idle")
    script += [
        "systemctl daemon-reload",
        "systemctl enable llmhost-standin-hw.service",
        "systemctl restart llmhost-standin-hw.service",
    ]
    ssh(" && ".join(script))
    sandbox.log(f"stand-in {NAME}: Proxmox host files reset (NVIDIA modules {modules})")


def replica_guest_step(present: bool) -> str:
    """The shell step that lists the fleet's second guest on the stand-in, or unlists it."""
    path = f"/etc/pve/lxc/{REPLICA_VMID}.conf"
    return put(path, LXC_202) if present else f"rm -f {path}"


def replica_guest(present: bool) -> None:
    """List the fleet's second guest as the stand-in's LXC 202 (replica.up), or unlist it
    (replica.down): its `pct start` then starts the replica container through the bridge.
    Nothing to do where no stand-in runs (it gets the file when `up` resets it)."""
    if sandbox.container_running(NAME):
        ssh(replica_guest_step(present), check=present)


def gpu_state_steps(state: str) -> list[str]:
    return [
        put(
            f"{FACT_ROOT}/monitoring/{kind}.csv",
            (MONITORING_CAPTURES / f"{kind}-{state}.csv").read_text(),
        )
        for kind in ("query-gpu", "query-apps")
    ]


def gpu_state(state: str) -> None:
    """The stand-in's nvidia-smi answers as the H200 did "idle" or with an orphan "held"."""
    ssh(" && ".join(gpu_state_steps(state)))


def edit_capture(path: str, sed_expression: str) -> None:
    """Change a captured file in place (same inode), so the bind mount over /proc shows it."""
    full = f"{FACT_ROOT}/{path}"
    ssh(f"sed {shlex.quote(sed_expression)} {full} > {full}.new && cat {full}.new > {full}")


def up() -> dict:
    state = sandbox.load_state()  # the sandbox's bridge, proxies and key come first
    key = Path(state.ssh_key)
    if not sandbox.container_exists(NAME):
        sandbox.create_container(key, NAME, IP)
        created = True
    else:
        created = False
    sandbox.authorize_key(key, NAME)
    if not sandbox.container_running(NAME):
        sandbox._run(["lxc-start", "-n", NAME, "-d"])
    sandbox.wait_booted(name=NAME)
    sandbox.wait_ssh(key, ip=IP)
    sandbox.write_ssh_config(key)
    # A container from an older checkout may lack the shims: give it the seed state.
    seeded = (
        f"test -f {FACT_ROOT}/monitoring/query-gpu.csv && test -f {FACT_ROOT}/proc/devices.loaded"
        f" && test -x {NVIDIA_SHIMS['modprobe']}"
    )
    if created or ssh(seeded, check=False) is None:
        reset()
    start_guest_bridge()
    info = {
        "name": NAME,
        "ip": IP,
        "ssh_key": str(key),
        "captures": FACT_ROOT,
        "command_log": COMMAND_LOG,
    }
    STATE_FILE.write_text(json.dumps(info, indent=2) + "\n")
    sandbox.log(f"stand-in Proxmox host {NAME} ready at {IP}")
    return info


def start_guest_bridge() -> None:
    """The loop answering the stand-in's `pct status/start` of its bridged guests."""
    mapping = [f"{vmid}={name}" for vmid, name in BRIDGED_GUESTS.items()]
    rootfs = f"/var/lib/lxc/{NAME}/rootfs"
    command = [sys.executable, "-m", "llmhost.testbed.guest_bridge", rootfs, *mapping]
    sandbox._spawn(BRIDGE_DAEMON, command, env={"PYTHONPATH": str(sandbox.REPO_ROOT)})
    sandbox._check_alive(BRIDGE_DAEMON)


def reboot() -> None:
    """lxc-stop/lxc-start, as a power cycle of the host would."""
    sandbox.reboot(NAME)
    sandbox.wait_ssh(sandbox.STATE_DIR / "id_ed25519", ip=IP)


def down() -> None:
    sandbox._stop(BRIDGE_DAEMON)
    if sandbox.container_exists(NAME):
        sandbox._run(["lxc-stop", "-n", NAME, "-k"], check=False)
        sandbox._run(["lxc-destroy", "-n", NAME])
        sandbox.log(f"destroyed {NAME}")
    STATE_FILE.unlink(missing_ok=True)


def load() -> dict:
    if not STATE_FILE.exists():
        raise sandbox.SandboxError(f"no stand-in at {STATE_FILE}: run `make standin-up` first")
    return json.loads(STATE_FILE.read_text())
