"""The one module of shared test helpers; test modules import helpers from here only.

Paths (REPO, FIXTURES, GOLDEN), the pyinfra runner and its result table, a shell in the
sandbox guest, the sandbox site's API key as a header (`api_headers`: vLLM answers 401 on
/v1/* without it), whether the sandbox serves its default model, and the golden files: what each
one renders to (the same list for the tests, which compare, and for tests/update_golden.py,
which writes; `make golden`). Fixtures live in the conftest.py files.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import IO

from llmhost.config.guest import GuestConfig
from llmhost.config.loading import load_guest, load_proxmox_host
from llmhost.config.proxmox_host import ProxmoxHostConfig
from llmhost.facts.nvidia import parse_proc_devices
from llmhost.gpu_userspace import driver_install_commands
from llmhost.host_plan import (
    plan,
    render_apt_pin,
    render_modprobe,
    render_modules,
    render_persistenced_unit,
    render_sysctls,
    render_udev_rule,
    systemd_boot_cmdline,
)
from llmhost.inventory import get_host
from llmhost.kernel_cmdline import edit_params, grub_params, set_grub_params
from llmhost.lxc_passthrough import passthrough_block, qm_set_commands, with_block
from llmhost.naming import unit_name
from llmhost.proofs.readiness import auth_headers, probe_once
from llmhost.render import render_env, render_unit
from llmhost.testbed.sandbox import API_KEY_FILE, STATE_DIR, SandboxState, api_key, ssh_command

REPO = Path(__file__).resolve().parents[1]
# Where this run's deploys write their results: make test gives them a directory of their own
# ($LLMHOST_RESULTS_DIR, tests/run_phases.py), a test run by hand the default, results/.
RESULTS = Path(os.environ.get("LLMHOST_RESULTS_DIR") or REPO / "results")
FIXTURES = REPO / "tests" / "fixtures"
H200 = FIXTURES / "h200"
GOLDEN = REPO / "tests" / "golden"
PYINFRA = str(Path(sys.executable).with_name("pyinfra"))
PY = sys.executable

# --- pyinfra, as a user runs it --------------------------------------------------------------

SERVE = ("inventory/sandbox.py", "deploys/serve.py")
SITE = ("inventory/sandbox.py", "deploys/site.py")
# Readiness and correctness only, for a run whose subject is not the load proofs: a restore
# between modules, a drill's way back. The gate and the draft A/B have their own modules; a
# gate here would add a minute and a noisy reading to a test about something else.
BASIC = ("--data", "verify=basic")


@dataclass
class Run:
    rc: int
    output: str
    seconds: float

    def tail(self, n: int = 60) -> str:
        return "\n".join(self.output.splitlines()[-n:])


def logged_run(argv: list[str], timeout: int, label: str, merged: bool = False) -> Run:
    """Run a command like a user does; keep the whole log under .sandbox/logs/, each line
    prefixed with the seconds since the start (where a module's time goes). merged: one
    stream, in the order written (stdout, then stderr, otherwise)."""
    logs = STATE_DIR / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    stderr = subprocess.STDOUT if merged else subprocess.PIPE
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}  # lines timed as written, not as flushed
    proc = subprocess.Popen(
        argv, cwd=REPO, env=env, text=True, stdout=subprocess.PIPE, stderr=stderr, bufsize=1
    )
    timed: list[str] = []
    streams: list[list[str]] = [[], []]

    def read(pipe: IO[str], into: list[str]) -> None:
        for line in pipe:
            into.append(line)
            timed.append(f"[{time.monotonic() - start:7.1f}s] {line}")

    readers = [
        threading.Thread(target=read, args=(pipe, into), daemon=True)
        for pipe, into in zip((proc.stdout, proc.stderr), streams, strict=True)
        if pipe is not None
    ]
    for reader in readers:
        reader.start()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise
    finally:
        for reader in readers:
            reader.join(timeout=10)
        took = time.monotonic() - start
        header = f"# {' '.join(argv)}\n# took {took:.1f}s, exit {proc.returncode}\n"
        (logs / f"{label}-{int(time.time())}.log").write_text(header + "".join(timed))
    return Run(proc.returncode, "".join(streams[0]) + "".join(streams[1]), took)


def pyinfra(*args: str, timeout: int = 1500) -> Run:
    return logged_run([PYINFRA, "-y", *args], timeout, "pyinfra")


def llmhost_site(*args: str, timeout: int = 1500) -> Run:
    """`llmhost site inventory/sandbox.py -y ...`: the Proxmox hosts run, then deploys/site.py."""
    argv = [PY, "-m", "llmhost.cli", "site", "inventory/sandbox.py", "-y", *args]
    return logged_run(argv, timeout, "llmhost-site", merged=True)


def results_rows(output: str) -> dict[str, tuple[str, str, str]]:
    """The --> Results table: operation -> (success, error, no change) columns."""
    rows = {}
    for line in output.split("--> Results:")[-1].splitlines()[2:]:
        m = re.match(r"^\s+(.+?)\s{2,}(\d+)\s+(\S+)\s+(\S+)\s+(\S+)\s*$", line)
        if m:
            rows[m.group(1)] = (m.group(3), m.group(4), m.group(5))
    return rows


def started_operations(output: str) -> list[str]:
    """The operations a pyinfra run started, in order, each by its own name (without the
    names of the @deploy steps around it, which pyinfra joins before it with " | ")."""
    started = re.findall(r"Starting operation: (.+?)\s*$", output, re.M)
    return [name.split(" | ")[-1] for name in started]


def refused_only(output: str) -> bool:
    """Every operation the run started is a host's refusal (llmhost/operations/refused.py):
    nothing else ran on any host."""
    started = started_operations(output)
    return bool(started) and all(name.startswith("refused: ") for name in started)


def refusal_summary(output: str) -> list[str]:
    """The run's closing lines naming each refused host (one per host, after the header)."""
    lines = output.rstrip().splitlines()
    for i in range(len(lines) - 1, -1, -1):
        if "host(s) refused, nothing changed on them:" in lines[i]:
            return [line.strip() for line in lines[i + 1 :]]
    return []


def changed_ops(output: str, errors_too: bool = False) -> dict[str, tuple[str, str, str]]:
    """The operations that changed something (success column not "-"), Grand total left out;
    with errors_too, also those whose error column is not "-"."""
    rows = results_rows(output)
    assert "Grand total" in rows, output[-3000:]
    return {
        op: c
        for op, c in rows.items()
        if op != "Grand total" and (c[0] != "-" or (errors_too and c[1] != "-"))
    }


# --- the sandbox guest -----------------------------------------------------------------------


def api_headers() -> dict[str, str]:
    """`Authorization: Bearer <key>` with the sandbox site's API key (its key file)."""
    if not API_KEY_FILE.exists():
        raise FileNotFoundError(f"no sandbox API key at {API_KEY_FILE}: run make sandbox-up")
    return auth_headers(api_key())


def guest_sh(sandbox: SandboxState, command: str, check: bool = True) -> str:
    """Run a shell command in the sandbox guest over ssh; its stdout, stripped."""
    return subprocess.run(
        ssh_command(Path(sandbox.ssh_key)) + [command],
        text=True,
        capture_output=True,
        check=check,
        timeout=120,
    ).stdout.strip()


def sandbox_guest(sandbox: SandboxState) -> GuestConfig:
    """The sandbox guest's group_data as deploys/serve.py sees it with inventory/sandbox.py."""
    return load_guest(get_host(str(REPO / SERVE[0]), sandbox.ip))


def llmhost_units(sandbox: SandboxState) -> list[str]:
    """The llmhost unit files installed on the guest, sorted."""
    return sorted(
        guest_sh(
            sandbox, "ls /etc/systemd/system/ | grep -E '^llmhost-.+[.]service$' || true"
        ).split()
    )


def default_not_served(sandbox: SandboxState) -> str | None:
    """None when the guest serves its default data (tiny-llama) from its units and no other
    llmhost unit runs or is enabled (a previous model's unit stays on disk, disabled, after a
    switch); else what is off. A draft variant of tiny-llama serves under the same name, so
    the units are checked as well as /v1/models."""
    cfg = sandbox_guest(sandbox)
    wanted = sorted(unit_name(model) for model, _ in cfg.units_and_ports())
    units = llmhost_units(sandbox)
    if not set(wanted) <= set(units):
        return f"llmhost units on the guest are {units or 'none'}, not {wanted}"
    others = [u for u in units if u not in wanted and not u.endswith(".d")]
    if others:
        states = (
            guest_sh(
                sandbox, "systemctl is-active " + " ".join(others) + "; true", check=False
            ).split()
            + guest_sh(
                sandbox, "systemctl is-enabled " + " ".join(others) + "; true", check=False
            ).split()
        )
        if "active" in states or "activating" in states or "enabled" in states:
            return f"another llmhost unit runs or is enabled: {others} ({states})"
    for model, port in cfg.units_and_ports():
        state = guest_sh(sandbox, f"systemctl is-active {unit_name(model)}", check=False)
        if state != "active":
            return f"{unit_name(model)} is {state or 'unknown'}"
        served = str(cfg.profile_for(model).served_name)
        probe = probe_once(f"http://{sandbox.ip}:{port}", served, headers=api_headers())
        if not probe.ready:
            return f"{served} at port {port} is not ready ({probe.stage}: {probe.detail})"
    return None


def serve_default(sandbox: SandboxState) -> None:
    """Make the guest serve its default model: deploys/serve.py with inventory/sandbox.py
    and verify=basic, unless it already does (then nothing runs)."""
    reason = default_not_served(sandbox)
    if reason is None:
        return
    print(f"[tests] serving the sandbox's default model: {reason}", flush=True)
    run = pyinfra(*SERVE, *BASIC)
    assert run.rc == 0, f"the default serve deploy failed ({reason}):\n{run.tail()}"


# --- a stand-in vLLM server (unit tests) -----------------------------------------------------


@dataclass
class FakeVLLM:
    """An OpenAI-compatible stand-in on 127.0.0.1 that records each request's Authorization
    header. With `key`, /v1/* answers 401 unless it is `Bearer <key>`, as vLLM does with
    VLLM_API_KEY; /health, /metrics, /version and /tokenize stay open. A context manager.

    Completions give `text` (" Paris"), streamed as vLLM does (one chunk per token, then a
    usage chunk, then [DONE]) when asked to stream.
    """

    key: str | None = None
    served: str = "m"
    text: str = " Paris"
    seen: list[tuple[str, str, str | None]] = field(default_factory=list)  # method, path, auth
    url: str = ""
    answer_after_s: float = 0.0  # a busy server: each non-streamed completion waits this long
    # HTTP/1.1 with connections kept open this long when idle (uvicorn's keep-alive timeout);
    # None: HTTP/1.0, one connection a request. Streaming needs None (its body ends at close).
    keep_alive_s: float | None = None
    port: int = 0  # 0: any free port; a port of an earlier FakeVLLM: the same server restarted
    peers: list[int] = field(default_factory=list)  # each request's client port, in order

    def __enter__(self) -> FakeVLLM:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            if fake.keep_alive_s is not None:
                protocol_version = "HTTP/1.1"
                timeout = fake.keep_alive_s

            def log_message(self, *args: object) -> None:
                pass

            def reply(self, status: int, body: object, content_type: str = "application/json"):
                data = body if isinstance(body, bytes) else json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def allowed(self) -> bool:
                auth = self.headers.get("Authorization")
                fake.seen.append((self.command, self.path, auth))
                fake.peers.append(self.client_address[1])
                if fake.key is None or not self.path.startswith("/v1"):
                    return True
                if auth == f"Bearer {fake.key}":
                    return True
                self.reply(401, {"error": "Unauthorized"})
                return False

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                if not self.allowed():
                    return
                if self.path == "/health":
                    self.reply(200, b"", "text/plain")
                elif self.path == "/version":
                    self.reply(200, {"version": "0.0-fake"})
                elif self.path == "/metrics":
                    self.reply(200, b"# no spec decode here\n", "text/plain")
                elif self.path == "/v1/models":
                    self.reply(200, {"object": "list", "data": [{"id": fake.served}]})
                else:
                    self.reply(404, {"error": "not found"})

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                if not self.allowed():
                    return
                if self.path == "/tokenize":
                    self.reply(200, {"tokens": list(range(1, len(body["prompt"].split()) + 1))})
                elif self.path == "/v1/completions" and body.get("stream"):
                    self.stream(int(body["max_tokens"]))
                elif self.path == "/v1/completions":
                    time.sleep(fake.answer_after_s)
                    choice = {"text": fake.text, "token_ids": [5], "prompt_token_ids": [1, 2]}
                    usage = {"completion_tokens": 1}
                    self.reply(200, {"choices": [choice], "usage": usage})
                elif self.path == "/v1/chat/completions":
                    choice = {"message": {"role": "assistant", "content": fake.text}}
                    self.reply(200, {"choices": [choice], "usage": {"completion_tokens": 1}})
                else:
                    self.reply(404, {"error": "not found"})

            def stream(self, tokens: int) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()  # HTTP/1.0: the body ends when the connection closes
                chunks = [{"choices": [{"index": 0, "text": "a"}]} for _ in range(tokens)]
                chunks.append({"choices": [], "usage": {"completion_tokens": tokens}})
                for chunk in chunks:
                    self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
                self.wfile.write(b"data: [DONE]\n\n")

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def auth(self, path: str) -> list[str | None]:
        """The Authorization header of each request to `path`, in order."""
        return [auth for _, p, auth in self.seen if p == path]


# --- golden files ----------------------------------------------------------------------------

LAB = str(REPO / "inventory" / "lab.py")
LXC = "llm-lxc.lab.example"
KVM = "llm-vm.lab.example"
PVE = "pve1.lab.example"
KIMI_MODELS = ("kimi-k2.5-int4", "kimi-k2.5-int4-eagle3")
# The catalog pins no commit of the EAGLE-3 head (none public was found): a site gives the
# one it reviewed in group_data. This stand-in is what the golden files are rendered with.
SITE_DRAFT_REVISIONS = {"kimi-k2.5-eagle3-mla": "e3" * 20}


def lab_model(model: str, **override: object) -> GuestConfig:
    """The lab's LXC guest serving `model`, with the site's pin of the draft's commit."""
    return lab_guest(served_model=model, model_revisions=SITE_DRAFT_REVISIONS, **override)


# What a fresh Proxmox VE 8 install on ZFS + UEFI writes to /etc/kernel/cmdline.
PVE_CMDLINE = "root=ZFS=rpool/ROOT/pve-1 boot=zfs quiet"
PVE_GRUB = (
    'GRUB_DEFAULT=0\nGRUB_TIMEOUT=5\nGRUB_DISTRIBUTOR="Proxmox VE"\n'
    'GRUB_CMDLINE_LINUX_DEFAULT="quiet"\nGRUB_CMDLINE_LINUX=""\n'
)
# An LXC guest's config before the deploy, and a KVM guest's with one GPU and a stale slot.
LXC_CONF = "arch: amd64\ncores: 32\nhostname: llm-lxc\nmemory: 262144\nunprivileged: 0\n"
KVM_CONF = "machine: q35\nbios: ovmf\nhostpci0: 0000:c1:00.0,pcie=1\nhostpci3: 0000:09:00.0\n"
KVM_GUESTS = [{"vmid": 301, "name": "llm-vm", "pci_addresses": ["0000:c1:00.0", "0000:c2:00.0"]}]


def lab_guest(name: str = LXC, **override: object) -> GuestConfig:
    if name == KVM:
        # inventory/lab.py's VM variant (its docstring): group_data/kvm_guests.py on the LXC
        # guest's data, which differs from it only in host_profile.
        override = {"host_profile": "kvm-vfio", **override}
        name = LXC
    return load_guest(get_host(LAB, name, override_data=dict(override)))


def lab_host(**override: object) -> ProxmoxHostConfig:
    return load_proxmox_host(get_host(LAB, PVE, override_data=dict(override)))


def kvm_vfio_host() -> ProxmoxHostConfig:
    return lab_host(host_profile="kvm-vfio", kvm_guests=KVM_GUESTS)


def h200_block() -> str:
    """The LXC passthrough block from the H200 box's /proc/devices and /dev/nvidia* names."""
    majors = parse_proc_devices((H200 / "proc-devices.txt").read_text().splitlines())
    nodes = (H200 / "dev-nvidia-nodes.txt").read_text().split()
    return passthrough_block(majors, nodes)


def kimi_files() -> dict[str, str]:
    """The unit and env file inventory/lab.py gives the LXC guest for each Kimi profile."""
    files = {}
    for model in KIMI_MODELS:
        cfg = lab_model(model)
        files[f"llmhost-{model}.service"] = render_unit(cfg, model, cfg.port)
        files[f"llmhost-{model}.env"] = render_env(cfg, model)
    return files


def eagle3_ab_unit_files() -> dict[str, str]:
    """The draft A/B's reference unit: the eagle3 profile served without its draft."""
    cfg = lab_model("kimi-k2.5-int4-eagle3")
    text = render_unit(cfg, "kimi-k2.5-int4-eagle3", cfg.port, without_draft=True)
    return {"llmhost-kimi-k2.5-int4-eagle3-nodraft.service": text}


def lxc_p2p_host_files() -> dict[str, str]:
    """deploys/host.py's files on the reference box (lxc-p2p) from a fresh Proxmox install."""
    cfg = lab_host()
    p = plan(cfg)
    cmdline = edit_params(PVE_CMDLINE.split(), p.kernel_params, p.kernel_params_absent)
    grub = set_grub_params(
        PVE_GRUB, edit_params(grub_params(PVE_GRUB) or [], p.kernel_params, p.kernel_params_absent)
    )
    return {
        "host/lxc-p2p.etc-kernel-cmdline": systemd_boot_cmdline(cmdline),
        "host/lxc-p2p.etc-default-grub": grub,
        "host/lxc-p2p.sysctl.conf": render_sysctls(p),
        "host/lxc-p2p.modules-load.conf": render_modules(p),
        "host/lxc-p2p.modprobe.conf": render_modprobe(p),
        "host/70-llmhost-nvidia.rules": render_udev_rule(),
        "host/nvidia-persistenced.service": render_persistenced_unit(),
        "host/llmhost-nvidia-driver.pref": render_apt_pin(cfg.nvidia_driver_version),
    }


def lxc_guest_conf_files() -> dict[str, str]:
    """The LXC guest's /etc/pve/lxc/<vmid>.conf with the H200 passthrough block."""
    vmid = lab_host().lxc_guests[0].vmid
    return {f"host/etc-pve-lxc-{vmid}.conf": with_block(LXC_CONF, h200_block())}


def kvm_vfio_host_files() -> dict[str, str]:
    """deploys/host.py's files for the kvm-vfio profile, and the qm set commands it runs."""
    cfg = kvm_vfio_host()
    p = plan(cfg)
    cmdline = edit_params(PVE_CMDLINE.split(), p.kernel_params, p.kernel_params_absent)
    commands = qm_set_commands(301, KVM_CONF, list(cfg.kvm_guests[0].pci_addresses))
    return {
        "host/kvm-vfio.etc-kernel-cmdline": systemd_boot_cmdline(cmdline),
        "host/kvm-vfio.modules-load.conf": render_modules(p),
        "host/kvm-vfio.modprobe.conf": render_modprobe(p),
        "host/kvm-vfio.qm-set.txt": "\n".join(commands) + "\n",
    }


def gpu_userspace_files() -> dict[str, str]:
    """The CUDA userspace install commands of each lab guest (never executed in tests)."""
    return {
        f"host/{name.split('.')[0]}.gpu-userspace.sh": "\n".join(
            driver_install_commands(lab_guest(name))
        )
        + "\n"
        for name in (LXC, KVM)
    }


GOLDEN_SETS: tuple[Callable[[], dict[str, str]], ...] = (
    kimi_files,
    eagle3_ab_unit_files,
    lxc_p2p_host_files,
    lxc_guest_conf_files,
    kvm_vfio_host_files,
    gpu_userspace_files,
)


def render_golden() -> dict[str, str]:
    """Every golden file: its name under tests/golden/ -> what the code renders now."""
    files: dict[str, str] = {}
    for render in GOLDEN_SETS:
        rendered = render()
        assert not files.keys() & rendered.keys(), f"{render.__name__} renders a name twice"
        files.update(rendered)
    return files


def golden_on_disk() -> list[str]:
    return sorted(p.relative_to(GOLDEN).as_posix() for p in GOLDEN.rglob("*") if p.is_file())


def golden_mismatch(name: str, text: str) -> str | None:
    path = GOLDEN / name
    if not path.exists():
        return f"tests/golden/{name} is missing"
    golden = path.read_text(encoding="utf-8")
    if text == golden:
        return None
    diff = difflib.unified_diff(
        golden.splitlines(), text.splitlines(), f"tests/golden/{name}", "rendered", lineterm=""
    )
    return "\n".join(list(diff)[:40])


def assert_golden_files(files: dict[str, str]) -> None:
    """Compare only: tests never write golden files (`make golden` does, after review)."""
    problems = [p for name, text in files.items() if (p := golden_mismatch(name, text))]
    assert not problems, (
        "\n".join(problems) + "\nif the change is intended, run `make golden` and review "
        "`git diff tests/golden`"
    )


@dataclass
class Stream:
    """A streamed completion as the client saw it: every chunk, and whether [DONE] came."""

    started: float = 0.0  # time.time() when the request was sent
    ended: float = 0.0  # when the response closed
    status: int = 0
    text_chunks: int = 0
    completion_tokens: int = 0  # from the final usage chunk
    done: bool = False  # the stream ended with `data: [DONE]`
    error: str = ""
    # per choice (its index): whether any text came, and the finish_reason it ended with
    texted: set[int] = field(default_factory=set)
    finished: dict[int, str] = field(default_factory=dict)
    # error objects sent inside the stream (vLLM still ends such a stream with [DONE])
    stream_errors: list[str] = field(default_factory=list)


def stream_completion(
    base_url: str, served: str, max_tokens: int, n: int = 1, timeout: float = 300
) -> Stream:
    """One streamed /v1/completions of exactly `max_tokens` tokens per sequence (ignore_eos),
    `n` sequences, with the sandbox's key; it never raises (the error is in the result)."""
    import requests  # only the sandbox tests stream

    body = {
        "model": served,
        "prompt": "Count the GPUs in the rack, one by one:",
        "max_tokens": max_tokens,
        "n": n,
        "temperature": 0.8,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    result = Stream(started=time.time())
    try:
        with requests.post(
            f"{base_url}/v1/completions",
            json=body,
            headers=api_headers(),
            stream=True,
            timeout=timeout,
        ) as resp:
            result.status = resp.status_code
            for raw in resp.iter_lines():
                line = raw.decode()
                if not line.startswith("data: "):
                    continue
                data = line.removeprefix("data: ")
                if data == "[DONE]":
                    result.done = True
                    continue
                chunk = json.loads(data)
                if chunk.get("error"):
                    result.stream_errors.append(json.dumps(chunk["error"])[:200])
                for choice in chunk.get("choices", []):
                    index = choice.get("index", 0)
                    if choice.get("text"):
                        result.text_chunks += 1
                        result.texted.add(index)
                    if choice.get("finish_reason"):
                        result.finished[index] = choice["finish_reason"]
                if chunk.get("usage"):
                    result.completion_tokens = int(chunk["usage"]["completion_tokens"])
    except Exception as e:  # noqa: BLE001 - a broken stream is the finding, not a crash
        result.error = f"{type(e).__name__}: {e}"
    result.ended = time.time()
    return result


def run_with_action_at(argv: list[str], marker: str, action: Callable[[], None]) -> Run:
    """Run `argv` (from the repository) to its end, calling `action` once, as soon as a line
    of its output contains `marker`; the action runs beside it (a thread's start, say)."""
    start = time.monotonic()
    proc = subprocess.Popen(
        argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    assert proc.stdout is not None
    lines, fired = [], False
    for line in proc.stdout:
        lines.append(line)
        if not fired and marker in line:
            fired = True
            action()
    proc.wait(timeout=60)
    out = "".join(lines)
    assert fired, f"never saw {marker!r}:\n{out[-3000:]}"
    return Run(proc.returncode, out, time.monotonic() - start)


def standin_recorded() -> list[str]:
    """The Proxmox commands the stand-in recorded and did not execute, oldest first."""
    from llmhost.testbed import standin

    return (standin.ssh(f"cat {standin.COMMAND_LOG} 2>/dev/null || true") or "").splitlines()


def bench_pids(sandbox: SandboxState) -> str:
    """The PIDs of the gate's benchmark (`vllm bench serve` per level) on the guest, if any."""
    # [b]: the pattern does not match the shell that runs pgrep
    return guest_sh(sandbox, "pgrep -f 'llmhost/bin/[b]ench_levels.py' || true", check=False)


def interrupt_when(
    argv: list[str],
    marker: str,
    timeout: float = 600,
    before_signal: Callable[[], None] | None = None,
) -> tuple[int, str, float]:
    """Start `argv` (from the repository), send SIGINT once a line contains `marker` (and
    `before_signal` returned); its exit code, whole output and the seconds from the signal
    to its exit."""
    proc = subprocess.Popen(
        argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    assert proc.stdout is not None
    lines = []
    deadline = time.monotonic() + timeout
    for line in proc.stdout:
        lines.append(line)
        if marker in line or time.monotonic() > deadline:
            break
    assert any(marker in x for x in lines), "".join(lines[-40:])
    time.sleep(0.3)
    if before_signal is not None:
        before_signal()
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    rest, _ = proc.communicate(timeout=60)
    return proc.returncode, "".join(lines) + rest, time.monotonic() - sent


class BackToBackStreams:
    """Long streams kept running back to back, in `chains` chains started `offset_s` apart,
    until one of them is refused or cut (the server stopped) or `finish()`: whatever moment a
    stop falls on, a stream is in flight then. (One stream started at a marker can end just
    before the stop: the stop waits on a last-answer probe that the stream itself slows.)"""

    def __init__(
        self,
        base_url: str,
        served: str,
        max_tokens: int,
        n: int = 1,
        chains: int = 2,
        offset_s: float = 2.0,
        most: int = 8,
    ) -> None:
        self.base_url, self.served, self.max_tokens, self.n = base_url, served, max_tokens, n
        self.most = most  # streams per chain at most: a server that never stops ends it too
        self.streams: list[Stream] = []
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._threads = [
            threading.Thread(target=self._chain, args=(i * offset_s,), daemon=True)
            for i in range(chains)
        ]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def finish(self, timeout: float = 300) -> list[Stream]:
        """Stop starting streams, wait for those running; every stream, oldest first."""
        self._done.set()
        for thread in self._threads:
            thread.join(timeout=timeout)
        with self._lock:
            return sorted(self.streams, key=lambda s: s.started)

    def whole(self, s: Stream) -> bool:
        """Every one of its n choices, each of max_tokens tokens, and [DONE]."""
        return self.uncut(s) and len(s.texted) == self.n

    def uncut(self, s: Stream) -> bool:
        """Each choice that began arrived whole (max_tokens tokens, finish_reason "length"),
        and [DONE]. vLLM may begin fewer than n choices of a request that comes in the instant
        its stop begins: those that got no text are refused, not cut (an error sent in the
        stream about them is kept in stream_errors, for the record)."""
        return (
            s.status == 200
            and not s.error
            and s.done
            and all(s.finished.get(i) == "length" for i in s.texted)
            and s.completion_tokens == len(s.texted) * self.max_tokens
        )

    def _chain(self, delay: float) -> None:
        if self._done.wait(delay):
            return
        for _ in range(self.most):
            s = stream_completion(self.base_url, self.served, self.max_tokens, n=self.n)
            with self._lock:
                self.streams.append(s)
            if self._done.is_set() or not self.whole(s):
                return


@dataclass
class TrafficTally:
    """What a client of the router saw: requests sent, failed, and streams cut short."""

    sent: int = 0
    streams: int = 0
    # (time.time() sent, status or error), one per failed request
    failed: list[tuple[float, str]] = field(default_factory=list)
    # (time.time() sent, what came), one per stream without [DONE] or without all its tokens
    truncated: list[tuple[float, str]] = field(default_factory=list)

    def failed_after(self, t: float) -> list[str]:
        return [what for sent, what in self.failed + self.truncated if sent >= t]


class RouterTraffic:
    """A client sending streaming and non-streaming completions through the router, one after
    the other, for as long as it runs (a thread): what a user of the fleet sees during a roll."""

    def __init__(
        self, base_url: str, served: str, stream_tokens: int = 48, streams: bool = True
    ) -> None:
        self.base_url, self.served, self.stream_tokens = base_url, served, stream_tokens
        self.streams = streams
        self.tally = TrafficTally()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> RouterTraffic:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=120)

    def _loop(self) -> None:
        import requests

        while not self._stop.is_set():
            self.tally.sent += 1
            sent = time.time()
            if self.streams and self.tally.sent % 2:
                s = stream_completion(self.base_url, self.served, self.stream_tokens)
                self.tally.streams += 1
                if s.status != 200 or s.error:
                    self.tally.failed.append((sent, f"stream: {s.status} {s.error}".strip()))
                elif not s.done or s.completion_tokens != self.stream_tokens:
                    what = f"stream: {s.completion_tokens} tokens, [DONE] {s.done}"
                    self.tally.truncated.append((sent, what))
                continue
            body = {"model": self.served, "prompt": "Hello", "max_tokens": 4}
            try:
                r = requests.post(
                    f"{self.base_url}/v1/completions", json=body, headers=api_headers(), timeout=120
                )
                if r.status_code != 200:
                    self.tally.failed.append((sent, f"{r.status_code} {r.text[:120]}"))
            except requests.RequestException as exc:
                self.tally.failed.append((sent, f"{type(exc).__name__}: {exc}"))


def free_port() -> int:
    """A loopback port nothing listens on (bound for a moment by the OS, then let go)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
