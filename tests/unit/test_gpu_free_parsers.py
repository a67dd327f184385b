"""gpu_free's parsers on real captures from an H200 (shared fixtures and llmhost's own drill)."""

from __future__ import annotations

import json

from llmhost.guest.gpu_free import (
    Proc,
    in_scope,
    parse_compute_apps,
    parse_fuser,
    parse_memory_used,
)
from tests.helpers import FIXTURES

H200 = FIXTURES / "h200"
DRILL = FIXTURES / "h200-llmhost"
NODES = ["/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm"]


def test_fuser_merged_output_keeps_each_device_of_the_holder() -> None:
    assert parse_fuser((H200 / "fuser-held.txt").read_text()) == {634: NODES}


def test_fuser_verbose_table_parses_to_the_same_holder() -> None:
    assert parse_fuser((H200 / "fuser-v-held.txt").read_text()) == {634: NODES}


def test_fuser_on_free_gpus_finds_nobody() -> None:
    assert parse_fuser((H200 / "fuser-free.txt").read_text()) == {}
    assert parse_fuser((DRILL / "vllm-fuser-after.txt").read_text()) == {}


def test_fuser_of_llmhost_drill_finds_the_vllm_orphan() -> None:
    # ps captured in the same drill: the orphan (PPID 1) named like vLLM's worker
    pid, ppid, _user, comm = (DRILL / "vllm-ps-orphan.txt").read_text().splitlines()[1].split()[:4]
    assert (ppid, comm) == ("1", "VLLM::Worker_TP")
    assert parse_fuser((DRILL / "vllm-fuser-held.txt").read_text()) == {int(pid): NODES}


def test_compute_apps_and_memory_used() -> None:
    assert parse_compute_apps((H200 / "query-compute-apps-held.csv").read_text()) == {634: 4614}
    assert parse_compute_apps((H200 / "query-compute-apps-free.csv").read_text()) == {}
    assert parse_memory_used((H200 / "query-gpu-memused-held.csv").read_text()) == {0: 4623}
    assert parse_memory_used((DRILL / "vllm-memused-held.csv").read_text()) == {0: 8811}
    assert parse_memory_used((DRILL / "vllm-memused-after.csv").read_text()) == {0: 0}


def test_scope_is_the_service_user_and_vllm_only() -> None:
    worker = Proc(1, 1, "root", "VLLM::Worker_TP", "python -c spawn_main")
    mine = Proc(2, 1, "vllm", "python3", "python3 x.py")
    foreign = Proc(3, 1, "root", "python3", "/opt/torch/.venv/bin/python3 -c spawn_main")
    assert in_scope(worker, "vllm") and in_scope(mine, "vllm")
    assert not in_scope(foreign, "vllm")


def test_drill_reports_say_what_was_killed_and_left() -> None:
    def report(name: str) -> dict:
        log = (DRILL / f"{name}-gpu-free.log").read_text()
        return json.loads(next(line for line in log.splitlines() if line.startswith("{")))

    vllm, foreign, force = report("vllm"), report("foreign"), report("force")
    assert vllm["free"] and len(vllm["killed_term"]) == 1
    assert foreign["left_out_of_scope"] and not foreign["killed_term"] and not foreign["free"]
    assert force["killed_term"] and force["free"]
