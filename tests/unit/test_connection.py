"""The deploys turn Nagle's algorithm off on pyinfra's SSH socket (llmhost/connection.py)."""

from __future__ import annotations

import socket
from types import SimpleNamespace

from llmhost.connection import no_delay


def test_the_ssh_socket_gets_tcp_nodelay() -> None:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    sock = socket.create_connection(server.getsockname())
    try:
        transport = SimpleNamespace(sock=sock)
        client = SimpleNamespace(get_transport=lambda: transport)
        host = SimpleNamespace(connector=SimpleNamespace(client=client))
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 0
        assert no_delay(host)
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
    finally:
        sock.close()
        server.close()


def test_a_connection_without_a_socket_is_left_alone() -> None:
    assert not no_delay(SimpleNamespace(connector=SimpleNamespace()))  # @local
