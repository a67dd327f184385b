"""The ExecStop= drain of a vLLM without --shutdown-timeout (llmhost/guest/drain_wait.py),
against a local HTTP server that answers /metrics as vLLM does, request by request."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from llmhost.fleet.drain import in_flight as control_in_flight
from llmhost.guest import drain_wait
from tests.unit.loopback import MetricsServer

METRICS = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{{engine="0",model_name="tiny-llama"}} {running}
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{{engine="0",model_name="tiny-llama"}} {waiting}
# HELP vllm:num_requests_running_total not a gauge of ours
vllm:num_requests_running_total 7.0
"""


def test_in_flight_is_running_plus_waiting_as_the_control_side_reads_it() -> None:
    for running, waiting in ((0.0, 0.0), (3.0, 2.0), (1.0, 0.0)):
        text = METRICS.format(running=running, waiting=waiting)
        assert drain_wait.in_flight(text) == running + waiting == control_in_flight(text)
    assert drain_wait.in_flight("# no vLLM here\nprocess_cpu_seconds_total 1.0\n") is None
    assert drain_wait.in_flight("vllm:num_requests_running 1e\n") is None  # not a number


class Server:
    """/metrics answering the next figure of `in_flight` at each read (the last one stays)."""

    def __init__(self, in_flight: list[int]) -> None:
        self.in_flight = in_flight
        self.reads = 0
        self.endpoint = MetricsServer(self.text)
        self.url = self.endpoint.url

    def text(self) -> str:
        n = self.in_flight[min(self.reads, len(self.in_flight) - 1)]
        self.reads += 1
        return METRICS.format(running=float(n), waiting=0.0)


@pytest.fixture
def server(request: pytest.FixtureRequest) -> Iterator[Server]:
    s = Server(request.param)
    yield s
    s.endpoint.close()


@pytest.mark.parametrize("server", [[2, 2, 1, 0]], indirect=True)
def test_the_wait_ends_when_the_last_request_in_flight_finished(server: Server) -> None:
    said = drain_wait.drain(server.url, timeout_s=30, every_s=0.05)
    assert said.startswith("drain: 2 request(s) in flight at the stop, none after")
    assert server.reads == 4


@pytest.mark.parametrize("server", [[1]], indirect=True)
def test_the_wait_is_bounded(server: Server) -> None:
    start = time.monotonic()
    said = drain_wait.drain(server.url, timeout_s=0.3, every_s=0.05)
    assert said == "drain: 1 request(s) still in flight after 0 s: stopping"
    assert 0.3 <= time.monotonic() - start < 5


def test_a_server_that_does_not_answer_is_not_waited_for() -> None:
    start = time.monotonic()
    said = drain_wait.drain("http://127.0.0.1:9/metrics", timeout_s=60)
    assert "does not answer" in said and time.monotonic() - start < 5
    assert drain_wait.main(["--url", "http://127.0.0.1:9/metrics", "--timeout", "60"]) == 0


def test_a_server_answering_garbage_is_not_waited_for_and_the_stop_never_fails() -> None:
    """Not HTTP at all (a half-written reply, say): no gauges, no wait, exit status 0."""
    import socket

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()

    def garbage() -> None:
        for _ in range(3):
            conn, _ = listener.accept()
            conn.sendall(b"NOT HTTP\r\n\r\n")
            conn.close()

    threading.Thread(target=garbage, daemon=True).start()
    url = f"http://127.0.0.1:{listener.getsockname()[1]}/metrics"
    assert "does not answer" in drain_wait.drain(url, timeout_s=60)
    assert drain_wait.main(["--url", url, "--timeout", "60"]) == 0
    listener.close()
