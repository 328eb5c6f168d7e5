"""Binding a listening socket, the one way every `igw` server reports that it could not.

A busy port, a privileged one, an address that is not on this host or a host name that
does not resolve all surface as an `OSError` (or, from grpcio, a bare `RuntimeError`)
somewhere deep in a server's start. Each bind runs inside `binding(host, port)`, which
turns that into one `ListenError` with a plain reason; `igw` (cli/main.py) prints it on
one line naming the flag that set the port, and exits 1, before anything says
"listening". The aiohttp servers bind first (`listening_socket`), so nothing of theirs
starts (a store connection, a scrape) before the port is theirs.
"""

from __future__ import annotations

import errno
import socket
from collections.abc import Iterator
from contextlib import contextmanager

from inference_gateway.errors import ListenError

__all__ = ["binding", "check_free", "listening_socket", "reason"]

REASONS = {
    errno.EADDRINUSE: "address already in use (another process listens there)",
    errno.EACCES: "permission denied (ports below 1024 need privileges)",
    errno.EADDRNOTAVAIL: "address not available (no interface of this host has it)",
}


def reason(error: OSError) -> str:
    """What went wrong, without the library's wording around it."""
    if error.errno in REASONS:
        return REASONS[error.errno]
    return error.strerror or str(error)


def listening_socket(host: str, port: int) -> socket.socket:
    """A bound, listening TCP socket for `host:port` (the first address `host` resolves
    to; `0.0.0.0`, `::` and loopback are one), or a `ListenError`. Servers bind first
    and start their work after, so a taken port stops them before anything else runs."""
    with binding(host, port):
        family, kind, proto, _, address = socket.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        sock = socket.socket(family, kind, proto)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:  # `::` takes IPv4 too, as aiohttp's sites do
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            sock.bind(address)
            sock.listen(1024)
        except BaseException:
            sock.close()
            raise
        sock.setblocking(False)
        return sock


def check_free(host: str, port: int) -> None:
    """A `ListenError` now when `host:port` cannot be bound: for servers that bind
    themselves and say little when they fail (grpcio logs a C++ line, then raises a bare
    RuntimeError)."""
    if port:
        listening_socket(host, port).close()


@contextmanager
def binding(host: str, port: int) -> Iterator[None]:
    """Run one bind; an `OSError` (or grpcio's `RuntimeError` "Failed to bind") becomes a
    `ListenError` for `host:port`."""
    try:
        yield
    except OSError as error:
        about_host = isinstance(error, socket.gaierror) or error.errno == errno.EADDRNOTAVAIL
        raise ListenError(host, port, reason(error), about_host=about_host) from None
    except RuntimeError as error:  # grpcio: add_*_port raises "Failed to bind to address"
        if "bind" not in str(error).lower():
            raise
        raise ListenError(host, port, "could not bind") from None
