"""How every `igw` server stops: the same signals, the same drain, the same log lines.

SIGTERM (Kubernetes, systemd), SIGINT (Ctrl-C) and SIGHUP (a closed terminal, some
supervisors' "restart") all mean one thing: stop taking new work, let what is in flight
finish within a grace period, cut what is left, exit 0. SIGHUP's default action kills
the process at once, streams and all, with nothing logged: a server that means to drain
must catch it like the other two. No server reloads on SIGHUP: configuration files are
watched and swapped live (assembly/config_watch.py).

Each server states its own "in flight" (`igw serve`: live requests; `igw picker`:
ext_proc streams; `igw global`: requests being relayed) and its own way to stop taking
work (close the listening socket; for the picker also readiness NOT_SERVING and GOAWAY).
The shared parts:

    stopped = stop_signals("igw picker")             # before starting anything
    ... start; sig = await stopped ...               # one line: which signal, draining
    ... stop accepting ...
    drained = await drain(in_flight, grace_s)        # waits, polling, never past grace_s
    log_drained("igw serve", drained)                # one line: waited for, finished, cut

and for aiohttp apps all of it in one call, `serve_http` (used by `igw serve`,
`igw global`, `igw pd-sidecar` and `igw auth`). The gRPC servers drain through the same `drain`:
`igw picker` (`assembly/picker.py`, after readiness NOT_SERVING) and `igw bbr`
(`Http2GrpcServer.stop`, after GOAWAY), and log the same `log_drained` line.
A second signal during the drain is ignored (the grace period bounds it;
Kubernetes follows with SIGKILL after `terminationGracePeriodSeconds` anyway).
"""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from inference_gateway.transport.defaults import DRAIN_GRACE_S
from inference_gateway.transport.listen import listening_socket

if TYPE_CHECKING:  # imported where it runs: the gRPC servers drain without aiohttp
    from aiohttp import web

__all__ = [
    "DRAIN_GRACE_S",
    "STOP_SIGNALS",
    "Drained",
    "drain",
    "log_drained",
    "serve_http",
    "stop_signals",
    "wait_for_stop",
]

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)

log = logging.getLogger("inference_gateway.transport.signals")


@dataclass(frozen=True, slots=True)
class Drained:
    waited_for: int  # in flight when the drain began
    cut: int  # still in flight when the grace period ended
    seconds: float

    @property
    def finished(self) -> int:
        return max(0, self.waited_for - self.cut)


def stop_signals(name: str) -> asyncio.Future[signal.Signals]:
    """Catch `STOP_SIGNALS` from now on; the future resolves to the first that arrives
    (one line says which). The handlers stay installed: a second signal must not kill
    the drain. Install before starting anything, await once running."""
    loop = asyncio.get_running_loop()
    arrived: asyncio.Future[signal.Signals] = loop.create_future()

    def on_signal(sig: signal.Signals) -> None:
        if arrived.done():
            log.info("%s: %s during the drain: ignored", name, sig.name)
            return
        log.info("%s: %s received: stopping, draining what is in flight", name, sig.name)
        arrived.set_result(sig)

    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, on_signal, sig)
    return arrived


async def wait_for_stop(name: str) -> signal.Signals:
    """`stop_signals` installed now and awaited."""
    return await stop_signals(name)


async def drain(in_flight: Callable[[], int], grace_s: float, poll_s: float = 0.05) -> Drained:
    """Wait until `in_flight()` is 0 or `grace_s` has passed."""
    started = time.monotonic()
    waited_for = in_flight()
    left = waited_for
    while left and time.monotonic() - started < grace_s:
        await asyncio.sleep(poll_s)
        left = in_flight()
    return Drained(waited_for, left, time.monotonic() - started)


def log_drained(name: str, drained: Drained) -> None:
    log.log(
        logging.WARNING if drained.cut else logging.INFO,
        "%s: drained in %.1f s: waited for %d in flight, %d finished, %d cut at the grace period",
        name,
        drained.seconds,
        drained.waited_for,
        drained.finished,
        drained.cut,
    )


async def serve_http(
    app: web.Application,
    *,
    name: str,
    host: str,
    port: int,
    in_flight: Callable[[], int],
    grace_s: float = DRAIN_GRACE_S,
    on_listening: Callable[[int], object] | None = None,
    **runner_options: Any,
) -> signal.Signals:
    """Serve `app` until a stop signal, then drain: the listening socket closes at once
    (new connections are refused), idle keep-alive connections close, requests in
    flight get `grace_s` to finish and are cancelled after it. The socket is bound
    before the app starts (a taken port is a `ListenError` and nothing ran);
    `on_listening(port)` runs once it serves; `runner_options` go to the runner
    (`http_settings.GatewayAppRunner`)."""
    stopped = stop_signals(name)  # before anything starts: no signal may kill the start
    from aiohttp import web

    from inference_gateway.transport.http_settings import GatewayAppRunner

    sock = listening_socket(host, port)  # a ListenError before the app starts anything
    runner = GatewayAppRunner(app, handle_signals=False, shutdown_timeout=grace_s, **runner_options)
    try:
        await runner.setup()
    except BaseException:
        sock.close()
        raise
    cleaned = False
    try:
        site = web.SockSite(runner, sock)
        await site.start()
        if on_listening is not None:
            on_listening(sock.getsockname()[1])
        sig = await stopped
        cleanup = asyncio.ensure_future(runner.cleanup())
        cleaned = True
        drained = await drain(in_flight, grace_s)
        await cleanup
        log_drained(name, drained)
        return sig
    finally:
        if not cleaned:  # an error before the signal: close what was opened
            await runner.cleanup()
