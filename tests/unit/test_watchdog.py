"""The serving unit's watchdog (llmhost/guest/watchdog.py): its verdicts on vLLM's own
metrics, table-driven; its loop against a real HTTP server on loopback whose counter stops,
with the clock driven by the test (no waiting)."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from pathlib import Path

import pytest

from llmhost.guest import watchdog
from llmhost.guest.watchdog import Rules, Sample, Watchdog, crawling, hung, parse_sample
from tests.unit.loopback import MetricsServer

METRICS = """\
# HELP vllm:generation_tokens_total Number of generation tokens processed.
vllm:generation_tokens_total{{engine="0",model_name="m"}} {gen}
vllm:num_requests_running{{engine="0",model_name="m"}} {running}
vllm:num_requests_waiting{{engine="0",model_name="m"}} {waiting}
"""


def metrics(gen: float, running: float = 0, waiting: float = 0) -> str:
    return METRICS.format(gen=gen, running=running, waiting=waiting)


def test_a_sample_sums_the_label_sets_and_needs_the_counter() -> None:
    two_engines = metrics(10, 1) + metrics(5, 2).split("\n", 1)[1]
    assert parse_sample(two_engines, 7.0) == Sample(7.0, 15.0, 3.0, 0.0)
    assert parse_sample("process_start_time_seconds 1\n", 7.0) is None


def s(at: float, gen: float, running: float = 1, waiting: float = 0) -> Sample:
    return Sample(at, gen, running, waiting)


@pytest.mark.parametrize(
    ("samples", "now", "says"),
    [
        # busy all along, the counter still: hung once the window is covered
        ([s(0, 100), s(5, 100), s(10, 100), s(15, 100)], 15, "hung: 1 running, 0 waiting"),
        ([s(0, 100, 0, 3), s(16, 100, 0, 3)], 16, "0 running, 3 waiting"),  # queued, none served
        ([s(5, 100), s(10, 100), s(15, 100)], 15, None),  # the window is not covered yet
        ([s(0, 100), s(5, 100), s(10, 101), s(15, 101)], 15, None),  # one token: alive
        ([s(0, 100), s(5, 100, 0), s(15, 100)], 15, None),  # idle at one look: not hung
        ([s(0, 100, 0), s(15, 100, 0)], 15, None),  # idle: nothing to generate
    ],
)
def test_hung_is_busy_at_every_look_with_no_token_over_the_window(
    samples: list[Sample], now: float, says: str | None
) -> None:
    found = hung(samples, now, 15)
    assert (found is None) if says is None else (found is not None and says in found), found


@pytest.mark.parametrize(
    ("samples", "says"),
    [
        ([s(0, 0, 4), s(60, 600, 4), s(180, 1800, 4)], "crawling: 10.0 tok/s with 4+ running"),
        ([s(0, 0, 4), s(180, 9000, 4)], None),  # 50 tok/s: at the floor
        ([s(0, 0, 4), s(60, 100, 0), s(180, 200, 4)], None),  # no load at one look: not judged
        ([s(30, 0, 4), s(180, 100, 4)], None),  # the window is not covered yet
    ],
)
def test_crawling_is_under_load_all_along_and_below_the_floor(
    samples: list[Sample], says: str | None
) -> None:
    found = crawling(samples, 180, 180, floor_tok_s=40, min_running=2)
    assert (found is None) if says is None else (found is not None and says in found), found


def looks(dog: Watchdog, gens: list[float], every: float = 5, start: float = 0) -> list:
    """Feed a busy server's counter, one look every `every` s; the decisions taken."""
    out = []
    for i, gen in enumerate(gens):
        now = start + i * every
        out.append(dog.look(s(now, gen), now))
    return out


def test_a_starting_server_settles_before_it_is_judged_then_a_hang_restarts_it() -> None:
    dog = Watchdog(Rules(hung_window_s=15, settle_s=30))
    decisions = looks(dog, [100] * 8)  # stuck from its first look: 35 s
    # Not before 30 s of answers (settle), then at once (its window covered by then).
    assert decisions[:6] == [None] * 6
    assert decisions[6] is not None and decisions[6][0] == "restart"
    assert "stuck at 100 for 30 s" in decisions[6][1]
    assert decisions[7] is None  # judged afresh after the restart: settling again


def test_after_max_restarts_within_the_window_it_is_held_out_not_restarted_forever() -> None:
    dog = Watchdog(Rules(hung_window_s=10, settle_s=0, max_restarts=2, per_s=600))
    taken = [d for d in looks(dog, [100] * 40) if d is not None]
    assert [kind for kind, _ in taken] == ["restart", "restart", "hold"]
    assert "restarted 2 times in the last 600 s already: held out" in taken[-1][1]
    assert dog.look(s(500, 100), 500) is None  # held: nothing more


def test_a_server_that_does_not_answer_is_not_judged() -> None:
    dog = Watchdog(Rules(hung_window_s=10, settle_s=0))
    assert [dog.look(None, t) for t in range(0, 60, 5)] == [None] * 12


class Server:
    """/metrics on loopback with a counter the test moves (or not)."""

    def __init__(self) -> None:
        self.gen, self.running = 0.0, 2.0
        self.endpoint = MetricsServer(lambda: metrics(self.gen, self.running))
        self.url = self.endpoint.url


@pytest.fixture
def server() -> Iterator[Server]:
    srv = Server()
    yield srv
    srv.endpoint.close()


def test_the_loop_restarts_a_unit_whose_counter_stops_and_writes_it_for_the_alert(
    server: Server, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = watchdog.parser().parse_args(
        ["--unit", "llmhost-m.service", "--metrics", server.url, "--hung-window", "15"]
        + ["--settle", "10", "--every", "5", "--textfile-dir", str(tmp_path)]
    )
    clock = {"now": 0.0}
    acted: list[list[str]] = []

    def sleep(seconds: float) -> None:
        clock["now"] += seconds
        if clock["now"] <= 20:
            server.gen += 50  # serving for 20 s, then the engine stops (SIGSTOP)

    def restart(argv: list[str]) -> int:
        acted.append(argv)
        server.gen, server.running = 0.0, 0.0  # restarted: a fresh engine, idle
        return 0

    watchdog.run(
        args,
        lambda: watchdog.read_metrics(server.url),
        restart,
        clock=lambda: clock["now"],
        sleep=sleep,
        looks=16,
    )
    assert acted == [["systemctl", "restart", "llmhost-m.service"]]
    said = capsys.readouterr().out
    assert "watchdog: llmhost-m.service hung: 2 running, 0 waiting" in said
    assert "stuck at 200 for 15 s (window 15 s): restarting it" in said
    prom = (tmp_path / "llmhost-watchdog-llmhost-m.service.prom").read_text()
    assert 'llmhost_watchdog_actions_total{unit="llmhost-m.service",action="restart"} 1' in prom
    assert 'llmhost_watchdog_held_out{unit="llmhost-m.service"} 0' in prom


def test_a_dry_run_says_and_does_nothing(server: Server, capsys: pytest.CaptureFixture) -> None:
    args: argparse.Namespace = watchdog.parser().parse_args(
        ["--unit", "u", "--metrics", server.url, "--hung-window", "10", "--settle", "0"]
        + ["--dry-run"]
    )
    clock = {"now": 0.0}
    acted: list[list[str]] = []

    def sleep(seconds: float) -> None:
        clock["now"] += seconds

    watchdog.run(
        args,
        lambda: watchdog.read_metrics(server.url),
        lambda argv: acted.append(argv) or 0,
        clock=lambda: clock["now"],
        sleep=sleep,
        looks=8,
    )
    assert acted == [] and "u hung:" in capsys.readouterr().out
