"""pyinfra's SSH connection without Nagle's algorithm: a guest command in 6 ms, not 49.

Profiling a converge that changed nothing (benchmarks/converge.py) showed ~50 guest commands
(facts, mostly) at 49 ms each, nearly all of it waiting in recv: paramiko sets no socket
options, so each small SSH packet waits behind the peer's delayed ACK (Nagle + delayed ACK,
~40 ms). With TCP_NODELAY on the connection's socket the same command takes ~6 ms on the
sandbox, as OpenSSH's own client does. Deploy files call `no_delay(host)`.
"""

from __future__ import annotations

import socket
from typing import Any


def no_delay(host: Any) -> bool:
    """Set TCP_NODELAY on the host's SSH socket; False where there is none (@local, docker)."""
    client = getattr(getattr(host, "connector", None), "client", None)
    transport = client.get_transport() if client is not None else None
    sock = getattr(transport, "sock", None)
    if not isinstance(sock, socket.socket):
        return False
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return True
