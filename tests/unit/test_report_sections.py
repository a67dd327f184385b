"""The state document's sections on real captures: the H200 box (tests/fixtures/h200-report,
taken through the device tool with the report's own commands) and a host without a GPU."""

from __future__ import annotations

import json
from pathlib import Path

from llmhost.report import sections as sec
from llmhost.report.facts import GpuTopology, MaskedEnvFile, UnitShow
from llmhost.report.markdown import host_md
from tests.helpers import FIXTURES, lab_host

H200 = FIXTURES / "h200-report"


def capture(name: str) -> str:
    return (H200 / name).read_text()


def test_hardware_of_the_h200_box_through_the_report_parsers() -> None:
    topo = GpuTopology().process(capture("topo-m.txt").splitlines())
    hw = sec.hardware(
        capture("gpu-inventory.csv"), topo, capture("lscpu.txt"), capture("meminfo.txt")
    )
    assert hw["gpus"] == [
        {
            "index": 0,
            "name": "NVIDIA H200",
            "memory_total_mib": 143771,
            "memory_used_mib": 0,
            "driver": "580.159.04",
            "pci_bus_id": "00000000:00:06.0",
        }
    ]
    rows = {r["item"]: r["actual"] for r in hw["rows"]}
    assert rows["CPU"] == "Intel(R) Xeon(R) Processor"
    assert rows["cores / threads"] == "1 socket(s) x 16 cores, 16 threads"
    assert rows["NUMA node0 CPUs"] == "0-15" and rows["RAM"] == "125.9 GiB"
    assert "GPU0\t X \t0-15" in hw["text"] and "\x1b[" not in hw["text"]  # colour codes gone


def test_without_a_gpu_the_sections_say_so_instead_of_failing() -> None:
    hw = sec.hardware("", "", capture("lscpu.txt"), capture("meminfo.txt"))
    assert hw["gpus"] == [] and hw["notes"] == [sec.NO_GPU]
    holders = sec.gpu_holders("", has_gpu=False)
    assert holders["notes"] == [sec.NO_GPU]
    soft = sec.software("6.1.0-28-amd64", None, "", None, {})
    assert {"item": "NVIDIA driver", "actual": sec.NO_GPU} in soft["rows"]


def test_gpu_holders_from_a_capture_with_a_zombie_worker() -> None:
    held = (FIXTURES / "h200" / "query-compute-apps-held.csv").read_text()
    section = sec.gpu_holders(held, has_gpu=True)
    assert section["rows"] == [
        {"item": "pid 634", "actual": "/opt/torch/.venv/bin/python3: 4614 MiB"}
    ]


def test_kernel_tuning_marks_drift_and_leaves_a_container_kernel_alone() -> None:
    cfg = lab_host()
    from llmhost.host_plan import plan

    p = plan(cfg)
    sysctl_file = "vm.swappiness = 60\nkernel.numa_balancing = 0\nvm.max_map_count = 1048576\n"
    section = sec.kernel_tuning(
        managed=True,
        running_cmdline=capture_cmdline(),
        wanted_params=p.kernel_params,
        absent_params=p.kernel_params_absent,
        next_boot=["root=ZFS=rpool", *p.kernel_params],
        sysctls_wanted=p.sysctls,
        sysctl_file=sysctl_file,
        sysctl_live={"vm.swappiness": "60"},
        in_container=True,
        swaps_active=[],
        swaps_fstab=[],
        modules_wanted=p.modules,
        modules_loaded=[],
    )
    drift = sec.drift_of([section])
    assert any("sysctl vm.swappiness (persisted)" in d and "actual 60" in d for d in drift)
    # The boot file has the parameters, the running kernel not yet: a reboot, not drift.
    assert not any("next boot" in d or "running" in d for d in drift)
    pending = [r for r in section["rows"] if r.get("note") == "REBOOT REQUIRED"]
    assert {r["item"] for r in pending} >= {"running iommu=off", "running pcie_aspm=off"}
    section = sec.kernel_tuning(
        managed=True,
        running_cmdline=capture_cmdline(),
        wanted_params=p.kernel_params,
        absent_params=[],
        next_boot=["root=ZFS=rpool"],
        sysctls_wanted={},
        sysctl_file="",
        sysctl_live={},
        in_container=True,
        swaps_active=[],
        swaps_fstab=[],
        modules_wanted=[],
        modules_loaded=[],
    )  # someone removed them from the boot loader's file: drift, twice
    drift = sec.drift_of([section])
    title = "Kernel cmdline, sysctls, swap and modules: "
    assert title + "next boot iommu=off (wanted present, actual absent)" in drift
    assert title + "running iommu=off (wanted present, actual absent)" in drift
    assert not any("(live)" in d or ": module " in d for d in drift)  # container: host's kernel


def capture_cmdline() -> list[str]:
    return (FIXTURES / "h200" / "proc-cmdline.txt").read_text().split()


def test_an_env_file_is_masked_on_the_host_and_compared_masked() -> None:
    fact = MaskedEnvFile()
    assert "VLLM_API_KEY|HF_TOKEN" in fact.command("/etc/llmhost/x.env")
    actual = fact.process(["# Managed by llmhost", "VLLM_API_KEY=********", "NCCL_P2P_LEVEL=SYS"])
    section = sec.served_model(
        model="m",
        unit="llmhost-m.service",
        show=UnitShow().process(
            ["ActiveState=active", "ExecStart={ path=/x ; argv[]=/x serve m ; }"]
        ),
        env_wanted={"VLLM_API_KEY": "********", "NCCL_P2P_LEVEL": "PHB"},
        env_actual=actual,
        secrets_match=True,
        description="d",
    )
    assert section["text"] == "/x serve m"
    assert sec.drift_of([section]) == [
        "Served model: m: env NCCL_P2P_LEVEL (wanted PHB, actual SYS)"
    ]


def test_the_markdown_marks_drift_and_is_json_ready(tmp_path: Path) -> None:
    section = {"title": "T", "rows": [sec.drift_row("x", "1", "2")], "notes": ["n"]}
    doc = {
        "host": "h",
        "role": "r",
        "generated": "now",
        "drift": sec.drift_of([section]),
        "sections": [section],
    }
    text = host_md(doc)
    assert "**Drift: 1 item(s)**" in text and "| x | 1 | 2 | **DRIFT** |" in text
    json.dumps(doc)


def test_the_served_model_section_shows_the_rollback_target_and_a_wrong_record() -> None:
    from llmhost.switch.plan import ServingRecord

    record = ServingRecord.parse(
        '{"current": "a", "previous": ["z"], "failed": {"model": "m", "why": "x", "at": 1}}'
    )
    section = sec.served_model(
        model="m",
        unit="llmhost-m.service",
        show={"ActiveState": "inactive"},
        env_wanted={},
        env_actual={},
        secrets_match=True,
        description="d",
        previous=record.describe_previous(),
        recorded=record.current,
    )
    rows = {r["item"]: r for r in section["rows"]}
    assert rows["previous model kept for rollback"]["actual"].startswith("z (unit kept, disabled)")
    assert "last failed switch: to m" in rows["previous model kept for rollback"]["actual"]
    # The data asks for m, the guest records that a (the rollback target) serves: drift.
    assert sec.drift_of([section]) and "recorded as serving" in sec.drift_of([section])[0]
