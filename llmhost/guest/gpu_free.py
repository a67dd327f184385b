"""Free the GPUs from leftover vLLM workers, and prove it by memory.used.

Killing vLLM's API server leaves `VLLM::EngineCore` / `VLLM::Worker*` processes holding GPU
memory (vllm#55510); only killing them frees it. One code path serves the pyinfra operation,
deploys/cleanup.py and the unit's ExecStartPre/ExecStopPost: this file runs as a script on the
guest with the system python3 (stdlib only) and is imported by the control side and the tests.

    python3 gpu_free.py --user vllm [--force] [--threshold-mib 1024] [--timeout 60] [--json]

Holders are found with `fuser /dev/nvidia*` (works inside LXC, where nvidia-smi shows host
PIDs) and, where PIDs are visible, `nvidia-smi --query-compute-apps`; orphans are `VLLM::*`
processes whose parent is PID 1. Only processes of the service user or vLLM's own are
signalled unless --force. Exit 0: free; 1: still held after the timeout; 2: holders outside
the scope were left alone.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import pwd
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field

NVIDIA_GLOB = "/dev/nvidia*"
LEFTOVER_GLOBS = ("/tmp/vllm_dist_*", "/dev/shm/__KMP_REGISTERED_LIB_*")
VLLM_COMM = re.compile(r"^VLLM::")


@dataclass
class Proc:
    pid: int
    ppid: int
    user: str
    comm: str
    cmdline: str
    devices: list[str] = field(default_factory=list)
    gpu_mib: int = 0
    reason: str = ""


@dataclass
class Report:
    found: list[Proc] = field(default_factory=list)
    killed_term: list[int] = field(default_factory=list)
    killed_kill: list[int] = field(default_factory=list)
    left_out_of_scope: list[int] = field(default_factory=list)
    removed_files: list[str] = field(default_factory=list)
    memory_used_mib: dict[int, int] = field(default_factory=dict)
    gpus: int = 0
    free: bool = False
    seconds: float = 0.0


# --- parsers (tested on real H200 captures in tests/fixtures/h200) ---------------------------


def parse_fuser(output: str) -> dict[int, list[str]]:
    """`fuser /dev/nvidia*` with stderr merged: '/dev/nvidia0:   634m 700' -> {634: [...]}.

    fuser writes device names to stderr and PIDs (with access letters) to stdout; merged,
    each device line carries its PIDs. `fuser -v` adds a USER/PID/ACCESS table; both parse.
    """
    holders: dict[int, list[str]] = {}
    device = ""
    for line in output.splitlines():
        if not line.strip() or line.strip().startswith("USER"):
            continue
        m = re.match(r"^(/dev/\S+?):(.*)$", line.strip())
        rest = line
        if m:
            device, rest = m.group(1), m.group(2)
        tokens = rest.split()
        if tokens and not tokens[0][0].isdigit() and len(tokens) >= 2 and tokens[1].isdigit():
            tokens = [tokens[1]]  # -v table row: USER PID ACCESS COMMAND
        for token in tokens:
            pid = re.match(r"^(\d+)[a-zA-Z]*$", token)
            if pid:
                holders.setdefault(int(pid.group(1)), [])
                if device and device not in holders[int(pid.group(1))]:
                    holders[int(pid.group(1))].append(device)
    return holders


def parse_compute_apps(csv: str) -> dict[int, int]:
    """`nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader,
    nounits` -> {pid: MiB}. A PID seen on several GPUs sums its memory."""
    apps: dict[int, int] = {}
    for line in csv.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 3 and parts[0].isdigit():
            mib = int(re.sub(r"\D", "", parts[-1]) or 0)
            apps[int(parts[0])] = apps.get(int(parts[0]), 0) + mib
    return apps


def parse_memory_used(csv: str) -> dict[int, int]:
    """`nvidia-smi --query-gpu=index,memory.used --format=csv,noheader,nounits` -> {gpu: MiB}."""
    used: dict[int, int] = {}
    for line in csv.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 2 and parts[0].isdigit():
            used[int(parts[0])] = int(re.sub(r"\D", "", parts[1]) or 0)
    return used


# --- the live system -------------------------------------------------------------------------


def read_proc(pid: int) -> Proc | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmdline = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        uid = os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None
    comm = stat[stat.index("(") + 1 : stat.rindex(")")]
    ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
    try:
        user = pwd.getpwuid(uid).pw_name
    except KeyError:
        user = str(uid)
    return Proc(pid=pid, ppid=ppid, user=user, comm=comm, cmdline=cmdline)


def all_pids() -> list[int]:
    return [int(d) for d in os.listdir("/proc") if d.isdigit()]


def run(cmd: list[str]) -> str:
    if not shutil.which(cmd[0]):
        return ""
    # One pipe for both streams keeps fuser's "/dev/nvidia0:" (stderr) before its PIDs (stdout).
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return proc.stdout


def nvidia_devices() -> list[str]:
    return sorted(p for p in glob.glob(NVIDIA_GLOB) if not os.path.isdir(p))


def memory_used() -> dict[int, int]:
    return parse_memory_used(
        run(["nvidia-smi", "--query-gpu=index,memory.used", "--format=csv,noheader,nounits"])
    )


def find_holders() -> dict[int, Proc]:
    found: dict[int, Proc] = {}
    devices = nvidia_devices()
    if devices:
        for pid, devs in parse_fuser(run(["fuser", *devices])).items():
            proc = read_proc(pid)
            if proc:
                proc.devices, proc.reason = devs, "holds " + ",".join(devs)
                found[pid] = proc
    apps = parse_compute_apps(
        run(
            [
                "nvidia-smi",
                "--query-compute-apps=pid,process_name,used_memory",
                "--format=csv,noheader,nounits",
            ]
        )
    )
    for pid, mib in apps.items():
        proc = found.get(pid) or read_proc(pid)
        if proc:  # invisible inside LXC: nvidia-smi reports host PIDs
            proc.gpu_mib = mib
            proc.reason = proc.reason or f"uses {mib} MiB (nvidia-smi)"
            found[pid] = proc
    for pid in all_pids():
        if pid in found:
            continue
        proc = read_proc(pid)
        if proc and proc.ppid == 1 and VLLM_COMM.match(proc.comm):
            proc.reason = "orphaned vLLM process (parent is PID 1)"
            found[pid] = proc
    found.pop(os.getpid(), None)
    return found


def unit_cgroup(pid: int | str) -> str | None:
    """The llmhost-*.service cgroup a process runs in, if any (cgroup v1 name=systemd or v2)."""
    try:
        with open(f"/proc/{pid}/cgroup") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in lines:
        m = re.search(r"/(llmhost-[^/]+\.service)(/|$)", line)
        if m:
            return m.group(1)
    return None


def served_by_live_unit(proc: Proc) -> str | None:
    """Processes of another llmhost unit are systemd's to manage, not leftovers."""
    unit = unit_cgroup(proc.pid)
    return unit if unit and unit != unit_cgroup("self") else None


def in_scope(proc: Proc, user: str | None) -> bool:
    return bool(
        (user and proc.user == user)
        or VLLM_COMM.match(proc.comm)
        or re.search(r"\bvllm\b|vllm-entry", proc.cmdline)
    )


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    proc = read_proc(pid)
    return proc is not None and "zombie" not in open(f"/proc/{pid}/status").read()


def wait_gone(pids: list[int], timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    left = [p for p in pids if alive(p)]
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = [p for p in left if alive(p)]
    return left


def signal_all(pids: list[int], sig: int) -> list[int]:
    sent = []
    for pid in pids:
        try:
            os.kill(pid, sig)
            sent.append(pid)
        except ProcessLookupError:
            pass
    return sent


def remove_leftovers(user: str | None) -> list[str]:
    """vLLM's gloo file store and libiomp5's registration files; only when no vLLM is alive."""
    if any(VLLM_COMM.match((read_proc(p) or Proc(0, 0, "", "", "")).comm) for p in all_pids()):
        return []
    removed = []
    for pattern in LEFTOVER_GLOBS:
        for path in glob.glob(pattern):
            try:
                owner = pwd.getpwuid(os.stat(path).st_uid).pw_name
            except (OSError, KeyError):
                continue
            if user is None or owner in (user, "root"):
                try:
                    if os.path.isdir(path):
                        shutil.rmtree(path)
                    else:
                        os.unlink(path)
                    removed.append(path)
                except OSError:
                    pass
    return removed


def free_gpus(
    user: str | None,
    force: bool = False,
    term_timeout: float = 20,
    threshold_mib: int = 1024,
    timeout: float = 60,
    log=print,
) -> Report:
    start = time.monotonic()
    report = Report()
    holders = find_holders()
    report.found = list(holders.values())
    targets = []
    for proc in holders.values():
        live = served_by_live_unit(proc)
        if live and not force:
            log(f"keep pid {proc.pid} ({proc.comm}): served by running unit {live}")
            continue
        scoped = force or in_scope(proc, user)
        log(
            f"{'kill' if scoped else 'LEAVE'} pid {proc.pid} ({proc.comm}, user {proc.user}): "
            f"{proc.reason}"
        )
        (targets if scoped else report.left_out_of_scope).append(proc.pid)
    if targets:
        report.killed_term = signal_all(targets, signal.SIGTERM)
        stubborn = wait_gone(targets, term_timeout)
        if stubborn:
            log(f"SIGKILL {stubborn}: still alive {term_timeout:.0f}s after SIGTERM")
            report.killed_kill = signal_all(stubborn, signal.SIGKILL)
            wait_gone(stubborn, 10)
    report.removed_files = remove_leftovers(user)
    deadline = time.monotonic() + timeout
    while True:
        report.memory_used_mib = memory_used()
        report.gpus = len(report.memory_used_mib)
        report.free = all(v <= threshold_mib for v in report.memory_used_mib.values())
        if report.free or time.monotonic() >= deadline:
            break
        time.sleep(0.5)
    report.seconds = round(time.monotonic() - start, 2)
    if report.gpus:
        log(
            f"GPU memory.used MiB: {report.memory_used_mib} "
            f"({'free' if report.free else f'NOT below {threshold_mib}'})"
        )
    else:
        log("no NVIDIA GPU visible (nvidia-smi absent): process cleanup only")
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--user", help="the service user whose processes are in scope")
    parser.add_argument("--force", action="store_true", help="kill holders outside the scope")
    parser.add_argument("--term-timeout", type=float, default=20)
    parser.add_argument("--threshold-mib", type=int, default=1024)
    parser.add_argument("--timeout", type=float, default=60)
    parser.add_argument("--json", action="store_true", help="print the report as JSON last")
    args = parser.parse_args(argv)
    report = free_gpus(
        args.user,
        args.force,
        args.term_timeout,
        args.threshold_mib,
        args.timeout,
        log=lambda m: print(f"gpu-free: {m}", flush=True),
    )
    print(
        f"gpu-free: killed {len(report.killed_term)} (SIGKILL {len(report.killed_kill)}), "
        f"removed {len(report.removed_files)} leftover files in {report.seconds}s",
        flush=True,
    )
    if args.json:
        print(json.dumps(asdict(report)), flush=True)
    if not report.free:
        return 1
    return 2 if report.left_out_of_scope else 0


if __name__ == "__main__":
    sys.exit(main())
