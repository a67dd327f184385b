"""The correctness record: which run of a unit passed which probe, on the guest.

It decides whether a converge that restarted nothing probes again (operations/verify.py's
`correct_due`), so each way it can be stale must make it not hold. A fake guest shell stands
in for systemd and the file; the sandbox runs it for real (tests/integration: the reboot
test expects exactly one probe after a reboot, the zero-change tests none).
"""

from __future__ import annotations

import re
import shlex

from llmhost.catalog import CorrectnessProfile, GoldenAnswer
from llmhost.endpoint import Endpoint
from llmhost.proofs.correct import CorrectnessCheck, CorrectnessRecord

UNIT = "llmhost-m.service"
PATH = "/opt/llmhost/state/llmhost-m.correct"


class Guest:
    """systemd's InvocationID of one unit and the guest's files, behind a shell."""

    def __init__(self, invocation: str) -> None:
        self.invocation = invocation
        self.files: dict[str, str] = {}

    def __call__(self, command: str) -> tuple[bool, str, str]:
        if command.startswith("systemctl show -p InvocationID --value "):
            return True, f"{self.invocation}\n", ""
        if command.startswith("cat "):
            return True, self.files.get(shlex.split(command)[1], ""), ""
        write = r"mkdir -p \S+ && printf '%s\\n' ('[^']*') > \S+ && mv -f \S+ (\S+)"
        m = re.fullmatch(write, command)
        assert m, command
        self.files[m.group(2)] = shlex.split(m.group(1))[0] + "\n"
        return True, "", ""


def record(guest: Guest, expect: str = "Paris") -> CorrectnessRecord:
    check = CorrectnessCheck(
        endpoint=Endpoint("http://127.0.0.1:1", "m", None),
        model="m",
        correctness=CorrectnessProfile(
            golden=(GoldenAnswer(prompt="The capital of France is", expect=expect),)
        ),
        model_dir="/nowhere",
        python="python3",
        refcheck="/nowhere/refcheck.py",
        shell=guest,
    )
    return CorrectnessRecord(UNIT, PATH, check)


def test_a_written_record_holds_for_the_same_run_and_probe() -> None:
    guest = Guest("0f1e")
    assert record(guest).holds() is None  # nothing recorded yet: probe
    record(guest).write()
    stamp = record(guest).holds()
    assert stamp is not None and stamp.startswith("0f1e ")


def test_a_new_run_of_the_unit_makes_it_stale() -> None:
    guest = Guest("0f1e")
    record(guest).write()
    guest.invocation = "a2b3"  # a restart: a deploy's, a reboot's, a crash's
    assert record(guest).holds() is None


def test_another_probe_makes_it_stale() -> None:
    guest = Guest("0f1e")
    record(guest).write()
    assert record(guest, expect="Lyon").holds() is None


def test_a_unit_without_a_run_has_no_stamp_and_nothing_is_written() -> None:
    guest = Guest("")
    assert record(guest).stamp() is None
    record(guest).write()
    assert guest.files == {} and record(guest).holds() is None
