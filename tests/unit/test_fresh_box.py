"""A fresh Proxmox box, its NVIDIA driver installed but its modules not loaded yet: the host
deploy loads them and goes on in the same run, the passthrough block read after the load.

Facts in, commands (or a noop, or a refusal) out: the operations' generators and the steps
they yield run here against a fake host that answers the facts from the H200 captures.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass, field
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from pyinfra.api import FunctionCommand, OperationError
from pyinfra.context import ctx_host

from llmhost.facts.files import FileText
from llmhost.facts.host import BootLoader, GuestStatus
from llmhost.facts.nvidia import (
    DeviceMajors,
    HostDriverVersion,
    NvidiaDeviceNodes,
    NvidiaKernelModule,
    NvidiaModule,
    parse_nvidia_module,
    parse_proc_devices,
)
from llmhost.lxc_passthrough import (
    CAP_NODES,
    GPU_NODES,
    UVM_NODES,
    ModuleLoad,
    passthrough_block,
    plan_module_load,
)
from llmhost.operations import guests
from llmhost.operations import host as host_ops
from llmhost.tasks import proxmox_host as task
from llmhost.testbed.standin import without_nvidia
from tests.helpers import H200, lab_host

PIN = "580.159.04"  # the H200 box's driver
KERNEL = "6.8.12-4-pve"
H200_MAJORS = parse_proc_devices((H200 / "proc-devices.txt").read_text().splitlines())
H200_NODES = sorted((H200 / "dev-nvidia-nodes.txt").read_text().split())
FRESH_MAJORS = {k: v for k, v in H200_MAJORS.items() if not k.startswith("nvidia")}
INSTALLED = NvidiaModule(KERNEL, PIN, (), True)  # on disk, not loaded: no GPU minor to read
LOADED = NvidiaModule(KERNEL, PIN, (0,), True)
CONF = "arch: amd64\nhostname: llm-lxc\nmemory: 262144\n\n[pre-upgrade]\narch: amd64"


@dataclass
class FakeHost:
    """A Proxmox host as the deploy reads it: facts by class (FileText by path), what it
    writes and runs at execution time."""

    facts: dict[Any, Any]
    name: str = "pve1.lab.example"
    print_prefix: str = "[pve1] "
    noops: list[str] = field(default_factory=list)
    written: dict[str, str] = field(default_factory=dict)
    ran: list[str] = field(default_factory=list)

    def get_fact(self, fact: type, **kwargs: Any) -> Any:
        if fact is FileText:
            return self.facts.get(("file", kwargs["path"]))
        return self.facts[fact]

    def noop(self, message: str) -> None:
        self.noops.append(message)

    def put_file(self, src: StringIO, dest: str) -> bool:
        self.written[dest] = src.read()
        self.facts[("file", dest)] = self.written[dest].rstrip("\n")
        return True

    def run_shell_command(self, command: Any, **_: Any) -> tuple[bool, Any]:
        self.ran.append(str(command))
        return True, None


def box(
    majors: dict[str, int] = H200_MAJORS,
    nodes: list[str] = H200_NODES,
    module: NvidiaModule = LOADED,
    loaded: str | None = PIN,
    conf: str | None = CONF,
    status: str = "running",
) -> FakeHost:
    return FakeHost(
        {
            DeviceMajors: majors,
            NvidiaDeviceNodes: nodes,
            NvidiaKernelModule: module,
            HostDriverVersion: loaded,
            BootLoader: "systemd-boot",
            GuestStatus: status,
            ("file", "/etc/pve/lxc/201.conf"): conf,
        }
    )


def shown(commands: list[Any]) -> list[str]:
    """Shell commands as they are; a FunctionCommand as the first line it shows."""
    return [c.args[0] if isinstance(c, FunctionCommand) else str(c) for c in commands]


# --- the fact ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("output", "module"),
    [
        (  # the H200 box: driver on disk, module loaded, one GPU (minor 0)
            [f"kernel {KERNEL}", "module 580.159.04", "nvidia-modprobe", "minor 0"],
            NvidiaModule(KERNEL, "580.159.04", (0,), True),
        ),
        (  # a fresh box: on disk, not loaded (no /proc/driver/nvidia/gpus yet)
            [f"kernel {KERNEL}", "module 590.48.01", "nvidia-modprobe"],
            NvidiaModule(KERNEL, "590.48.01", (), True),
        ),
        ([f"kernel {KERNEL}"], NvidiaModule(KERNEL, None, (), False)),  # no driver at all
        (  # 8 GPUs, listed in /proc/driver's order; a garbled version is no version
            [f"kernel {KERNEL}", "module x", *(f"minor {m}" for m in (7, 0, 3, 1, 2, 6, 4, 5))],
            NvidiaModule(KERNEL, None, tuple(range(8)), False),
        ),
    ],
)
def test_the_module_fact_reads_kernel_module_on_disk_gpu_minors_and_nvidia_modprobe(
    output: list[str], module: NvidiaModule
) -> None:
    assert parse_nvidia_module(output) == module


H200_DEVICES = (H200 / "proc-devices.txt").read_text()
UNLOADED_DEVICES = without_nvidia(H200_DEVICES)  # as the stand-in fakes a fresh box


@pytest.mark.parametrize(
    ("devices", "version_file", "driver", "asks_nvidia_smi"),
    [
        (H200_DEVICES, True, PIN, False),  # the module's own file
        (H200_DEVICES, False, PIN, True),  # /proc/driver hidden (LXC): NVML, module loaded
        (UNLOADED_DEVICES, False, None, False),  # a fresh box: nvidia-smi would load it
        (H200_DEVICES.replace("195 nvidia\n", ""), False, None, False),  # nvidia's own major
    ],
    ids=["version file", "proc/driver hidden", "fresh box", "no nvidia major"],
)
def test_the_driver_fact_asks_nvidia_smi_only_while_the_module_is_loaded(
    tmp_path: Path, devices: str, version_file: bool, driver: str | None, asks_nvidia_smi: bool
) -> None:
    """Its shell command, run with /proc under tmp_path and a recording nvidia-smi on PATH."""
    proc, bin_dir, asked = tmp_path / "proc", tmp_path / "bin", tmp_path / "asked"
    (proc / "driver" / "nvidia").mkdir(parents=True)
    (proc / "devices").write_text(devices)
    if version_file:
        version = (H200 / "proc-driver-nvidia-version.txt").read_text()
        (proc / "driver" / "nvidia" / "version").write_text(version)
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text(f'#!/bin/sh\necho "$*" >> {asked}\necho {PIN}\n')
    smi.chmod(0o755)
    command = HostDriverVersion().command()
    assert command.count("/proc/") == 2  # both paths move under tmp_path
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    out = subprocess.run(
        ["sh", "-c", command.replace("/proc/", f"{proc}/")],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert HostDriverVersion().process(out.splitlines()) == driver
    assert asked.exists() == asks_nvidia_smi


# --- the plan ----------------------------------------------------------------------------------

LOAD_ALL = ("modprobe nvidia", "modprobe nvidia_uvm", GPU_NODES, UVM_NODES, CAP_NODES)
NODES_ONLY = (GPU_NODES, UVM_NODES, CAP_NODES)


@pytest.mark.parametrize(
    ("majors", "nodes", "module", "commands", "missing"),
    [
        (H200_MAJORS, H200_NODES, LOADED, (), ()),  # loaded, every node there: nothing
        (
            FRESH_MAJORS,
            [],
            INSTALLED,
            LOAD_ALL,
            ("module nvidia", "module nvidia_uvm", "/dev/nvidiactl", "/dev/nvidia-uvm"),
        ),
        (  # nvidia loaded (nvidia-smi's nvidia-modprobe does that), nvidia_uvm not
            {k: v for k, v in H200_MAJORS.items() if k != "nvidia-uvm"},
            ["/dev/nvidia0", "/dev/nvidiactl"],
            LOADED,
            ("modprobe nvidia_uvm", *NODES_ONLY),
            ("module nvidia_uvm", "/dev/nvidia-uvm"),
        ),
        (  # both loaded, no CUDA call yet: /dev/nvidia-uvm missing (the udev rule not there)
            H200_MAJORS,
            ["/dev/nvidia0", "/dev/nvidiactl"],
            LOADED,
            NODES_ONLY,
            ("/dev/nvidia-uvm",),
        ),
        (  # 8 GPUs, one node missing
            H200_MAJORS,
            [n for n in H200_NODES if n != "/dev/nvidia0"] + [f"/dev/nvidia{m}" for m in range(7)],
            NvidiaModule(KERNEL, PIN, tuple(range(8)), True),
            NODES_ONLY,
            ("/dev/nvidia7",),
        ),
    ],
)
def test_what_is_not_loaded_is_loaded_and_missing_nodes_are_created(
    majors: dict[str, int],
    nodes: list[str],
    module: NvidiaModule,
    commands: tuple[str, ...],
    missing: tuple[str, ...],
) -> None:
    assert plan_module_load(majors, nodes, module, PIN) == ModuleLoad(missing, commands)


@pytest.mark.parametrize(
    ("module", "words"),
    [
        (  # no driver for the running kernel: what to install
            NvidiaModule(KERNEL, None, (), False),
            [
                f"no NVIDIA kernel module is installed for kernel {KERNEL}",
                f"install NVIDIA driver {PIN} with the pve-headers of kernel {KERNEL}",
            ],
        ),
        (  # another driver on disk than the pin: both named, before it is loaded
            NvidiaModule(KERNEL, "590.48.01", (), True),
            [
                f"installed for kernel {KERNEL} is 590.48.01",
                f"group_data pins nvidia_driver_version {PIN}",
            ],
        ),
        (  # no nvidia-modprobe: no way to create the nodes (nor for the udev rule at boot)
            NvidiaModule(KERNEL, PIN, (), False),
            ["nvidia-modprobe is not installed", f"reinstall NVIDIA driver {PIN}"],
        ),
    ],
)
def test_a_box_that_cannot_load_the_pinned_module_is_refused_naming_what_to_install(
    module: NvidiaModule, words: list[str]
) -> None:
    load = plan_module_load(FRESH_MAJORS, [], module, PIN)
    assert load.commands == () and load.refusal is not None
    for w in words:
        assert w in load.refusal, load.refusal


def test_the_node_commands_use_nvidia_modprobe_with_the_kernels_own_minors() -> None:
    """/dev/nvidiactl is minor 255, each GPU's minor comes from /proc/driver/nvidia/gpus (no
    GPU there fails the command), the uvm pair from -u -c0, the MIG caps from their files."""
    assert "nvidia-modprobe -c255 $minors" in GPU_NODES
    assert "/proc/driver/nvidia/gpus/*/information" in GPU_NODES and "exit 1" in GPU_NODES
    assert UVM_NODES == "nvidia-modprobe -u -c0"
    assert 'nvidia-modprobe -f "$f"' in CAP_NODES


# --- the operation -----------------------------------------------------------------------------


def load_op(fake: FakeHost) -> list[Any]:
    with ctx_host.use(fake):
        return list(host_ops.nvidia_modules_loaded._inner(pin=PIN))  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("fake", "commands"),
    [
        (box(), []),  # the second run: nothing
        (
            box(FRESH_MAJORS, [], INSTALLED, loaded=None),
            [*LOAD_ALL, "cat /proc/driver/nvidia/version"],  # then the version, read then
        ),
        (
            box(FRESH_MAJORS, [], NvidiaModule(KERNEL, None, (), False), loaded=None),
            [
                f"refuse: no NVIDIA kernel module is installed for kernel {KERNEL} (modinfo "
                "nvidia finds none, /proc/devices lists no nvidia): install NVIDIA driver "
                f"{PIN} with the pve-headers of kernel {KERNEL} (DKMS builds the module for "
                "it), then run this deploy again"
            ],
        ),
    ],
)
def test_the_operation_loads_only_where_something_is_missing(
    fake: FakeHost, commands: list[str]
) -> None:
    out = load_op(fake)
    assert shown(out) == commands
    assert bool(fake.noops) == (not commands)
    if commands:
        assert isinstance(out[-1], FunctionCommand)


@pytest.mark.parametrize(
    ("found", "error"),
    [
        (PIN, None),
        ("575.57.08", "NVIDIA kernel module 575.57.08 after modprobe, group_data pins "),
        (None, "NVIDIA kernel module not loaded after modprobe"),
    ],
)
def test_after_the_load_the_module_must_be_the_pin(
    found: str | None, error: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(host_ops, "say", lambda message: None)
    with ctx_host.use(box(loaded=found)):
        if error is None:
            host_ops.loaded_module_is_pin(PIN)
            return
        with pytest.raises(OperationError) as exc:
            host_ops.loaded_module_is_pin(PIN)
    assert error in str(exc.value) and f"nvidia_driver_version {PIN}" in str(exc.value)


# --- the block, read after the load ------------------------------------------------------------


def block_op(fake: FakeHost, block: str | None) -> list[Any]:
    with ctx_host.use(fake):
        return list(guests.lxc_gpu_block._inner(vmid=201, block=block))  # type: ignore[attr-defined]


def test_with_no_block_at_prepare_time_the_block_is_one_step_computed_when_it_runs() -> None:
    out = block_op(box(FRESH_MAJORS, []), None)
    assert len(out) == 1 and isinstance(out[0], FunctionCommand)
    assert out[0].args[:2] == ("cat /proc/devices", "ls /dev/nvidia*")


def test_a_guest_without_its_config_is_still_refused() -> None:
    out = block_op(box(FRESH_MAJORS, [], conf=None), None)
    assert shown(out) == [
        "refuse: /etc/pve/lxc/201.conf does not exist: create LXC guest 201 first"
    ]


@pytest.mark.parametrize("block", [None, "prepared"])
def test_an_unprivileged_guest_is_refused_before_its_gpus_are_shared(block: str | None) -> None:
    """Its unit's LimitMEMLOCK=infinity cannot be raised in an unprivileged container."""
    conf = CONF.replace("memory: 262144\n", "memory: 262144\nunprivileged: 1\n")
    assert "unprivileged: 1" in conf
    prepared = passthrough_block(H200_MAJORS, H200_NODES) if block else None
    out = block_op(box(FRESH_MAJORS, [], conf=conf), prepared)
    (said,) = shown(out)
    assert said.startswith("refuse: LXC guest 201 is unprivileged") and "LimitMEMLOCK" in said
    # Only the guest's own section counts, not a snapshot's ([pre-upgrade]).
    snapshot = CONF + "\nunprivileged: 1"
    assert not shown(block_op(box(FRESH_MAJORS, [], conf=snapshot), None))[0].startswith("refuse")


@pytest.mark.parametrize(
    ("conf", "status", "written", "ran"),
    [
        (CONF, "running", True, ["pct reboot 201"]),  # fresh: written, the guest rebooted
        (CONF, "stopped", True, []),  # a stopped guest reads it when it starts
        ("with block", "running", False, []),  # already there: nothing
    ],
)
def test_the_step_writes_the_block_of_the_live_majors_and_nodes(
    conf: str, status: str, written: bool, ran: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    said: list[str] = []
    monkeypatch.setattr(guests, "say", said.append)
    block = passthrough_block(H200_MAJORS, H200_NODES)
    if conf == "with block":
        conf = guests.with_block(CONF + "\n", block).rstrip("\n")
    fake = box(conf=conf, status=status)  # the facts as they read after the load
    with ctx_host.use(fake):
        guests.block_from_live_state(201)
    path = "/etc/pve/lxc/201.conf"
    assert (path in fake.written) == written
    if written:
        main = fake.written[path].split("[pre-upgrade]")[0]
        assert "lxc.cgroup2.devices.allow: c 238:* rwm" in main  # the uvm major, read now
        assert "lxc.mount.entry: /dev/nvidia-uvm dev/nvidia-uvm" in main
        assert guests.conf_with_block(fake.facts[("file", path)], block) is None  # converged
    assert [c.replace("'", "") for c in fake.ran] == ran
    assert "nvidia-uvm major 238" in said[0]


def test_the_step_fails_the_host_when_the_load_left_no_uvm_major() -> None:
    fake = box({k: v for k, v in H200_MAJORS.items() if k != "nvidia-uvm"})
    with ctx_host.use(fake), pytest.raises(OperationError, match="lacks nvidia-uvm"):
        guests.block_from_live_state(201)
    assert fake.written == {}


# --- preflight and the deploy's order ----------------------------------------------------------


def h200_host() -> Any:
    """The lab's Proxmox host, pinned to the H200 box's driver."""
    return lab_host(nvidia_driver_version=PIN)


@pytest.mark.parametrize(
    ("fake", "block", "refused"),
    [
        (box(), passthrough_block(H200_MAJORS, H200_NODES), None),  # loaded: as before
        (box(FRESH_MAJORS, [], INSTALLED, loaded=None), None, None),  # loaded by the run
        (  # no driver: this host refused, naming what to install
            box(FRESH_MAJORS, [], NvidiaModule(KERNEL), loaded=None),
            None,
            f"no NVIDIA kernel module is installed for kernel {KERNEL}",
        ),
    ],
)
def test_preflight_leaves_the_block_to_after_the_load_or_refuses_the_host(
    fake: FakeHost, block: str | None, refused: str | None
) -> None:
    with ctx_host.use(fake):
        pre = task.preflight(h200_host())
    assert pre.loader == "systemd-boot"
    assert pre.block == block
    assert (pre.refused or "").startswith(refused or "") and bool(pre.refused) == bool(refused)


@pytest.mark.parametrize(
    ("fake", "refused"),
    [
        (box(loaded="575.57.08"), f"NVIDIA kernel module 575.57.08, group_data pins {PIN}"),
        (box(loaded=None), "/proc/devices lists the NVIDIA modules but their version cannot"),
    ],
)
def test_other_live_states_refuse_this_host_alone_and_stop_no_run(
    fake: FakeHost, refused: str
) -> None:
    """A loaded module other than the pin, an unreadable version, nodes that give no block:
    the host is refused (the site's other hosts go on), it raises nothing while preparing."""
    with ctx_host.use(fake):
        pre = task.preflight(h200_host())
    assert pre.block is None and pre.refused, pre
    want = refused.replace(f"pins {PIN}", f"pins nvidia_driver_version {PIN}")
    assert want in pre.refused, pre.refused


def test_an_unknown_boot_loader_refuses_this_host_alone() -> None:
    fake = box()
    fake.facts[BootLoader] = None
    with ctx_host.use(fake):
        pre = task.preflight(lab_host(boot_loader="auto"))
    assert pre.refused and "cannot tell the boot loader" in pre.refused


class Recorder:
    """Every operation the deploy calls, by name, in order."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def op(self, *_: Any, **kwargs: Any) -> Any:
        self.names.append(kwargs["name"])
        return self

    def did_change(self) -> bool:
        return True

    def __getattr__(self, attr: str) -> Any:  # files.put, server.shell, systemd.service, ...
        return self.op


OPERATIONS = (
    "kernel_cmdline",
    "swap_off",
    "nvidia_modules_loaded",
    "lxc_gpu_block",
    "kvm_hostpci",
    "guest_start_at_boot",
    "guest_running",
    "running_cmdline",
    "verify_cmdline",
)


def deploy_order(fake: FakeHost, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the operations proxmox_host adds for this host, in order."""
    rec = Recorder()
    for name in OPERATIONS:
        monkeypatch.setattr(task, name, rec.op)
    monkeypatch.setattr(task, "refuse_host", lambda what, message: rec.names.append(what))
    for module in ("files", "server", "systemd"):
        monkeypatch.setattr(task, module, rec)
    monkeypatch.setattr(task, "say", lambda message: None)
    fake.facts |= {task.Container: "none", task.FstabSwaps: [], task.ActiveSwaps: []}
    fake.facts[task.RunningCmdline] = []
    with ctx_host.use(fake):
        task.proxmox_host._inner(h200_host())  # type: ignore[attr-defined]
    return rec.names


LOAD_NAME = "NVIDIA modules loaded (nvidia, nvidia_uvm) and their /dev nodes"
REFUSED = "the host's boot loader or NVIDIA driver"


def test_the_modules_load_after_their_options_are_written_and_before_what_needs_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """options nvidia_uvm uvm_disable_hmm=1 applies at load, so modprobe.d comes first;
    persistenced and the passthrough block need the loaded module."""
    names = deploy_order(box(FRESH_MAJORS, [], INSTALLED, loaded=None), monkeypatch)
    load = names.index(LOAD_NAME)
    assert names.index("module options (/etc/modprobe.d/llmhost.conf)") < load
    assert names.index("update-initramfs (module list or options changed)") < load
    assert load < names.index("nvidia-persistenced enabled and running")
    blocks = [i for i, n in enumerate(names) if n.startswith("GPU passthrough block")]
    assert blocks and load < min(blocks)
    assert REFUSED not in names


def test_a_box_without_the_driver_gets_its_refusal_and_nothing_else(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    names = deploy_order(box(FRESH_MAJORS, [], NvidiaModule(KERNEL), loaded=None), monkeypatch)
    assert names == [REFUSED]


# --- the stand-in's captures for the module states ---------------------------------------------


def test_the_standins_unloaded_proc_devices_has_no_nvidia_major_and_nothing_else_missing() -> None:
    from llmhost.testbed import standin

    text = (H200 / "proc-devices.txt").read_text()
    assert parse_proc_devices(standin.without_nvidia(text).splitlines()) == FRESH_MAJORS
    with pytest.raises(ValueError, match="module_states"):
        standin.module_state_steps("module_states")  # a typo is no state


def test_the_standins_proc_driver_nvidia_reads_as_the_h200_box() -> None:
    """The version the deploy compares with the pin, the GPU minor the node command reads
    (its awk's third field), the MIG capability minors of the captured /dev/nvidia-caps."""
    from llmhost.facts.nvidia import parse_driver_version
    from llmhost.testbed import standin

    files = standin.nvidia_module_files()
    assert parse_driver_version(files["version"]) == PIN
    info = files["gpus/0000:00:06.0/information"].splitlines()
    minor = [line.split()[2] for line in info if line.startswith("Device Minor:")]
    assert minor == ["0"] and "/dev/nvidia0" in H200_NODES
    caps = {
        f"/dev/nvidia-caps/nvidia-cap{files[f'capabilities/mig/{cap}'].split()[1]}"
        for cap in ("config", "monitor")
    }
    assert caps == {n for n in H200_NODES if n.startswith("/dev/nvidia-caps/")}
