"""The monitoring files llmhost writes, from data to text (promtool checks them on the
stand-in: tests/integration/test_monitoring_sandbox.py), and the GPU textfile from the H200's
own nvidia-smi answers, idle and with an orphan holding 8 GiB."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from pydantic import SecretStr

from llmhost.config.loading import ConfigError
from llmhost.config.monitoring import MetricsSettings, MonitoringSettings
from llmhost.guest import gpu_metrics
from llmhost.monitoring import (
    TEXTFILE_DIR,
    SiteHost,
    defaults_file,
    exporter_listen,
    gate_pass_export,
    gate_text,
    gate_textfile,
    gate_textfile_command,
    prometheus_args,
    render_alertmanager_config,
    render_prometheus_config,
    render_rules,
    scrape_targets,
)
from tests.helpers import lab_host

CAPTURES = Path(__file__).resolve().parents[1] / "fixtures" / "h200-monitoring"
SITE = [
    SiteHost("pve1", "10.0.0.2", "proxmox_host", 9100),
    SiteHost("llm-lxc", "10.0.0.11", "serving_guest", 9100, vllm_ports=(8000,)),
    SiteHost("llm-vm", "llm-vm.lab.example", "serving_guest", 9101, vllm_ports=(8001,)),
]


def samples(text: str) -> dict[str, float]:
    return {
        s.name: s.value for family in text_string_to_metric_families(text) for s in family.samples
    }


MIB = 1024 * 1024


def gpu_textfile(state: str, in_server: bool = False) -> dict[str, float]:
    """The textfile from the H200's answers, its processes attributed by cgroup (a host)."""
    gpus = (CAPTURES / f"query-gpu-{state}.csv").read_text()
    apps = (CAPTURES / f"query-apps-{state}.csv").read_text()
    held = gpu_metrics.held_by_processes(apps, lambda pid: in_server)
    return samples(gpu_metrics.render(gpus, apps, held, 1796182380.0))


def test_an_orphan_holding_memory_outside_llmhosts_units_is_the_zombie_signal() -> None:
    held = gpu_textfile("held")
    assert held["llmhost_gpu_memory_held_without_server_bytes"] == 8802 * MIB  # its own MiB
    assert held["llmhost_gpu_compute_processes"] == 1
    assert held["llmhost_gpu_memory_total_bytes"] == 143771 * MIB
    assert held["llmhost_gpu_metrics_up"] == 1


def test_an_idle_gpu_or_one_a_server_holds_is_not() -> None:
    assert gpu_textfile("idle")["llmhost_gpu_memory_held_without_server_bytes"] == 0
    assert gpu_textfile("held", in_server=True)["llmhost_gpu_memory_held_without_server_bytes"] == 0


def test_in_an_lxc_guest_memory_in_use_with_no_unit_active_is_held() -> None:
    gpus = (CAPTURES / "query-gpu-held.csv").read_text()
    assert gpu_metrics.held_by_units(gpus, units_active=0) == 8811 * MIB
    assert gpu_metrics.held_by_units(gpus, units_active=1) == 0


def test_a_process_in_an_llmhost_unit_is_a_server_wherever_its_cgroup_says(tmp_path) -> None:
    for pid, cgroup in [
        ("10", "0::/system.slice/llmhost-kimi-k2.5-int4.service\n"),
        ("11", "0::/lxc.payload.201/system.slice/llmhost-kimi-k2.5-int4-nodraft.service\n"),
        ("12", "0::/user.slice/user-0.slice/session-3.scope\n"),
    ]:
        (tmp_path / pid).mkdir()
        (tmp_path / pid / "cgroup").write_text(cgroup)
    assert gpu_metrics.in_llmhost_unit("10", proc=str(tmp_path))
    assert gpu_metrics.in_llmhost_unit("11", proc=str(tmp_path))
    assert not gpu_metrics.in_llmhost_unit("12", proc=str(tmp_path))
    assert not gpu_metrics.in_llmhost_unit("13", proc=str(tmp_path))  # gone: not a server


def test_the_script_computes_what_it_wrote_on_the_h200() -> None:
    # The same script on the H200 (tests/gpu/capture_monitoring.sh) wrote these files from
    # these answers: by process (the orphan's cgroup is no llmhost unit) and by unit.
    on_device = samples((CAPTURES / "llmhost_gpu-held.prom").read_text())
    ours = gpu_textfile("held")
    assert set(on_device) == set(ours)
    key = "llmhost_gpu_memory_held_without_server_bytes"
    assert on_device[key] == ours[key] == 8802 * MIB
    by_unit = samples((CAPTURES / "llmhost_gpu-units-held.prom").read_text())
    assert by_unit[key] == 8811 * MIB and by_unit["llmhost_serving_units_active"] == 0


def test_nvidia_smi_failing_is_written_as_down(tmp_path: Path) -> None:
    out = tmp_path / "gpu.prom"
    rc = gpu_metrics.main(["--out", str(out), "--nvidia-smi", str(tmp_path / "no-such-smi")])
    assert rc == 1
    assert samples(out.read_text())["llmhost_gpu_metrics_up"] == 0


def test_targets_come_from_the_inventory_each_host_once() -> None:
    targets = scrape_targets([*SITE, SITE[0]])
    assert [t.address for t in targets.vllm] == ["10.0.0.11:8000", "llm-vm.lab.example:8001"]
    assert targets.router == []
    assert [t.address for t in targets.node] == [
        "10.0.0.2:9100",
        "10.0.0.11:9100",
        "llm-vm.lab.example:9101",
    ]


def test_an_ipv6_address_is_bracketed() -> None:
    assert exporter_listen(MetricsSettings(), "fd00::11") == "[fd00::11]:9100"
    v6 = scrape_targets([SiteHost("g6", "fd00::12", "serving_guest", 9100, vllm_ports=(8000,))])
    assert [t.address for t in v6.vllm] == ["[fd00::12]:8000"]


def test_node_exporter_listens_on_the_scrape_address_when_it_is_an_ip() -> None:
    assert exporter_listen(MetricsSettings(), "10.0.0.11") == "10.0.0.11:9100"
    assert exporter_listen(MetricsSettings(), "llm-vm.lab.example") == ":9100"
    assert exporter_listen(MetricsSettings(listen_address="10.1.0.5"), "x") == "10.1.0.5:9100"


def test_prometheus_listens_where_the_site_says_with_a_bounded_retention() -> None:
    s = MonitoringSettings(listen_address="10.0.0.2")
    assert prometheus_args(s) == [
        "--web.listen-address=10.0.0.2:9090",
        "--storage.tsdb.retention.time=15d",
        "--storage.tsdb.retention.size=20GB",
    ]
    assert defaults_file(prometheus_args(s)).endswith(
        'ARGS="--web.listen-address=10.0.0.2:9090 --storage.tsdb.retention.time=15d '
        '--storage.tsdb.retention.size=20GB"\n'
    )
    config = render_prometheus_config(s, "pve1", scrape_targets(SITE))
    assert '- targets: ["10.0.0.11:8000"]' in config and 'replica: "llm-lxc"' in config
    assert "job_name: vllm-router" not in config  # no router in this site
    router = SiteHost("rt", "10.0.0.3", "router", 9100, (), 29000, "10.0.0.3")
    gpu_host = SiteHost("pve2", "10.0.0.4", "proxmox_host", 9100, dcgm_port=9400)
    with_dcgm = render_prometheus_config(s, "pve1", scrape_targets([*SITE, gpu_host]))
    assert "job_name: dcgm" in with_dcgm and '"10.0.0.4:9400"' in with_dcgm
    with_router = render_prometheus_config(s, "pve1", scrape_targets([*SITE, router]))
    assert "job_name: vllm-router" in with_router and '"10.0.0.3:29000"' in with_router
    assert "Bearer" not in config and "authorization" not in config.lower()


@pytest.mark.parametrize(
    ("monitoring", "message"),
    [
        ({"listen_address": "0.0.0.0"}, "monitoring.listen_address"),
        ({"listen_address": "10.0.0.2", "retention_size": "0"}, "monitoring.retention_size"),
        ({"listen_address": "10.0.0.2", "retention_time": "forever"}, "monitoring.retention_time"),
        ({}, "monitoring.listen_address: required field is missing"),
    ],
)
def test_bad_monitoring_data_is_refused_naming_the_field(monitoring: dict, message: str) -> None:
    from llmhost.config.loading import load_monitoring
    from tests.helpers import LAB, PVE, get_host

    with pytest.raises(ConfigError, match=message):
        load_monitoring(get_host(LAB, PVE, override_data={"monitoring": monitoring}))


def webhook_of(config: str) -> str:
    """The receiver's URL as YAML reads it: llmhost writes it as a JSON string, which is a
    YAML double-quoted scalar (amtool parses the file on the stand-in)."""
    (found,) = re.findall(r"^ +- url: (.+)$", config, re.MULTILINE)
    return json.loads(found)


def test_a_webhook_url_is_a_secret_written_only_into_alertmanagers_file() -> None:
    hook = "https://hooks.chat.example/services/T000/B000/s3cr3t-t0ken"
    s = MonitoringSettings(listen_address="10.0.0.2", webhook_url=hook)
    assert hook not in repr(s) and hook not in str(s.model_dump())
    config = render_alertmanager_config(s)
    assert "receiver: webhook" in config and webhook_of(config) == hook
    # Quoted as data: a URL with YAML's own characters stays one string.
    odd = "https://h.example/x?a=1&b='2'#\"frag\"{}"
    odd_s = s.model_copy(update={"webhook_url": SecretStr(odd)})
    assert webhook_of(render_alertmanager_config(odd_s)) == odd


def test_a_bad_webhook_url_is_refused_without_repeating_it() -> None:
    from llmhost.config.loading import load_monitoring
    from tests.helpers import LAB, PVE, get_host

    bad = {"listen_address": "10.0.0.2", "webhook_url": "hooks.example/s3cr3t"}
    with pytest.raises(ConfigError, match="monitoring.webhook_url") as refused:
        load_monitoring(get_host(LAB, PVE, override_data={"monitoring": bad}))
    assert "s3cr3t" not in str(refused.value)


def test_the_other_roles_accept_the_monitoring_keys() -> None:
    # A Proxmox host that is also the monitoring host validates as a Proxmox host.
    lab_host(monitoring={"listen_address": "10.0.0.2"}, metrics={"port": 9100})


def test_each_alert_and_recording_rule_is_rendered_with_the_sites_timings() -> None:
    s = MonitoringSettings(listen_address="10.0.0.2", alerts={"replica_down_for_s": 15})
    rules = render_rules(s, gpu_interval_s=5)
    for alert in (
        "LlmhostReplicaDown",
        "LlmhostQueueGrowing",
        "LlmhostKvCacheFull",
        "LlmhostUnitRestarting",
        "LlmhostGpuHeldWithoutServer",
        "LlmhostGateStale",
    ):
        assert f"alert: {alert}" in rules
    assert "for: 15s" in rules
    for record in ("output_tokens:rate1m", "ttft_seconds:p99", "tpot_seconds:p50"):
        assert f"record: llmhost:{record}" in rules
    assert "receiver: none" in render_alertmanager_config(s)


def test_the_export_command_writes_exactly_the_text_whose_hash_the_operation_compares(
    tmp_path: Path,
) -> None:
    """gate_exports compares the file's sha256 with gate_text's: the command must write
    those very bytes (a trailing newline more would make every run a change)."""
    import subprocess

    command = gate_textfile_command("tiny-llama", 1796182380, 604800)
    subprocess.run(["sh", "-c", command.replace(TEXTFILE_DIR, str(tmp_path))], check=True)
    written = (tmp_path / "llmhost_gate_tiny-llama.prom").read_bytes()
    assert written == gate_text("tiny-llama", 1796182380, 604800).encode()


def test_a_passing_gate_is_exported_only_where_node_exporter_runs() -> None:
    command = gate_textfile_command("tiny-llama", 1796182380, 604800)
    assert command.startswith("if [ -d /var/lib/prometheus/node-exporter ]; then")
    assert 'llmhost_gate_last_pass_timestamp_seconds{model="tiny-llama"} 1796182380' in command
    assert "/var/lib/prometheus/node-exporter/llmhost_gate_tiny-llama.prom" in command


class GuestFacts:
    """A guest as gate_exports reads it: node exporter's textfile directory (or not), the
    gate files present, their sha256."""

    def __init__(self, files: dict[str, str], exporter: bool = True) -> None:
        self.files = files
        self.exporter = exporter
        self.noops: list[str] = []

    def get_fact(self, fact: type, **kwargs: object) -> object:
        from llmhost.facts.files import MatchingFiles

        if fact is MatchingFiles:
            return sorted(self.files)
        paths = kwargs["paths"]
        assert isinstance(paths, tuple)
        directory = {TEXTFILE_DIR: {"type": "d"}} if self.exporter else {}
        return directory | {
            p: {"type": "f", "sha256": hashlib.sha256(self.files[p].encode()).hexdigest()}
            for p in paths
            if p in self.files
        }

    def noop(self, message: str) -> None:
        self.noops.append(message)


def gate_export_commands(
    guest: GuestFacts,
    records: dict[str, tuple[int, int]],
    installed_now: bool = False,
    keep: tuple[str, ...] = (),
) -> list[str]:
    from pyinfra.context import ctx_host

    from llmhost.operations.verify import gate_exports

    with ctx_host.use(guest):
        inner = gate_exports._inner  # type: ignore[attr-defined]
        return [str(c) for c in inner(records, installed_now, keep)]


def test_a_model_never_gated_exports_zero_and_models_no_longer_served_are_dropped() -> None:
    """GateStale (time() - last pass > max age) fires for 0: a model that was never gated
    is as stale as one gated long ago. The old single file and a switched-away model's file
    go, so no alert names a model the guest no longer serves."""
    legacy = "/var/lib/prometheus/node-exporter/llmhost_gate.prom"
    gone = gate_textfile("old-model")
    guest = GuestFacts({legacy: "x", gone: "y"})
    commands = gate_export_commands(guest, {"tiny-llama": (0, 600)})
    assert commands[0] == f"rm -f {legacy} {gone}"
    assert 'llmhost_gate_last_pass_timestamp_seconds{model="tiny-llama"} 0' in commands[1]
    assert gate_textfile("tiny-llama") in commands[1] and len(commands) == 2


def test_gate_records_already_exported_change_nothing() -> None:
    here = {gate_textfile("tiny-llama"): gate_text("tiny-llama", 1796182380, 600)}
    guest = GuestFacts(here)
    assert gate_export_commands(guest, {"tiny-llama": (1796182380, 600)}) == []
    assert guest.noops == ["node exporter's gate records are up to date"]
    # A newer pass recorded on the guest than exported: exported again.
    assert len(gate_export_commands(GuestFacts(here), {"tiny-llama": (1796182999, 600)})) == 1


def test_no_gate_record_is_written_where_node_exporter_is_not_yet_installed() -> None:
    """deploys/serve.py on a monitored site before any site run: no textfile directory, so a
    write would do nothing and be due again on every run (a second run must change nothing).
    deploys/site.py installs node exporter first in the same run: then it is written."""
    bare = GuestFacts({}, exporter=False)
    assert gate_export_commands(bare, {"tiny-llama": (0, 600)}) == []
    assert bare.noops == [
        "no node exporter here (/var/lib/prometheus/node-exporter): no gate records to export"
    ]
    assert len(gate_export_commands(bare, {"tiny-llama": (0, 600)}, installed_now=True)) == 1


def test_a_switchs_source_keeps_its_gate_record_until_the_switch_commits() -> None:
    """A switch that fails rolls back to its source, which then serves again on the record it
    had: the export during the switch leaves that file alone (the switch's commit removes it,
    as does any export without the switch)."""
    source = gate_textfile("tiny-llama")
    guest = GuestFacts({source: gate_text("tiny-llama", 1796182380, 600)})
    commands = gate_export_commands(guest, {"tiny-llama-alt": (0, 600)}, keep=("tiny-llama",))
    assert len(commands) == 1 and gate_textfile("tiny-llama-alt") in commands[0]
    assert gate_export_commands(guest, {"tiny-llama-alt": (0, 600)})[0] == f"rm -f {source}"


def test_with_the_gate_off_the_files_left_from_when_it_was_on_go() -> None:
    """A site that turns verify.throughput_gate off exports no record (hooks), so the files
    its earlier gates wrote are removed: no GateStale for a gate no run measures."""
    left = gate_textfile("tiny-llama")
    guest = GuestFacts({left: gate_text("tiny-llama", 1796182380, 600)})
    assert gate_export_commands(guest, {}) == [f"rm -f {left}"]
    empty = GuestFacts({})
    assert gate_export_commands(empty, {}) == []
    assert empty.noops == ["node exporter's gate records are up to date"]


def test_a_pass_exports_the_gates_record_only_where_the_gate_runs() -> None:
    """With the gate off, a draft A/B that passes alone records its time for the cadence
    (load.py) but tells node exporter nothing: hooks would remove it again at the next run."""
    gated = gate_pass_export("tiny-llama", 600, gated=True)(1796182380)
    assert gated == gate_textfile_command("tiny-llama", 1796182380, 600)
    assert gate_pass_export("tiny-llama", 600, gated=False)(1796182380) == "true"
