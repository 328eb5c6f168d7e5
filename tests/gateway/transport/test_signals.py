"""transport/signals.py: one stop rule for every server. A drain waits for what is in
flight and says how much it cut; `serve_http` stops listening on SIGHUP as on SIGTERM,
lets a request finish within the grace period and cancels one that outlives it."""

from __future__ import annotations

import asyncio
import logging
import os
import signal

import aiohttp
import pytest
from aiohttp import web

from inference_gateway.transport.signals import STOP_SIGNALS, drain, serve_http


async def test_drain_waits_for_zero_or_the_grace_period() -> None:
    left = [3]

    async def finish() -> None:
        while left[0]:
            await asyncio.sleep(0.05)
            left[0] -= 1

    task = asyncio.create_task(finish())
    drained = await drain(lambda: left[0], grace_s=5, poll_s=0.01)
    await task
    assert (drained.waited_for, drained.finished, drained.cut) == (3, 3, 0)
    stuck = await drain(lambda: 2, grace_s=0.2, poll_s=0.01)
    assert (stuck.waited_for, stuck.finished, stuck.cut) == (2, 0, 2)
    assert 0.2 <= stuck.seconds < 1.0


def test_every_stop_signal_is_caught() -> None:
    assert set(STOP_SIGNALS) == {signal.SIGTERM, signal.SIGINT, signal.SIGHUP}


@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGINT])
async def test_serve_http_drains_then_cuts_at_the_grace_period(
    sig: signal.Signals, caplog: pytest.LogCaptureFixture
) -> None:
    live = {"n": 0}
    cancelled: list[str] = []

    async def slow(request: web.Request) -> web.Response:
        live["n"] += 1
        try:
            await asyncio.sleep(float(request.query["s"]))
            return web.Response(text="done")
        except asyncio.CancelledError:
            cancelled.append(request.query["s"])
            raise
        finally:
            live["n"] -= 1

    app = web.Application()
    app.router.add_get("/", slow)
    bound: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    caplog.set_level(logging.INFO, "inference_gateway.transport.signals")
    server = asyncio.create_task(
        serve_http(
            app,
            name="test server",
            host="127.0.0.1",
            port=0,
            in_flight=lambda: live["n"],
            grace_s=0.6,
            on_listening=bound.set_result,
            handler_cancellation=True,
        )
    )
    port = await asyncio.wait_for(bound, 10)
    async with aiohttp.ClientSession() as client:
        quick = asyncio.create_task(client.get(f"http://127.0.0.1:{port}/?s=0.3"))
        stuck = asyncio.create_task(client.get(f"http://127.0.0.1:{port}/?s=30"))
        while live["n"] < 2:
            await asyncio.sleep(0.01)
        os.kill(os.getpid(), sig)
        assert await asyncio.wait_for(server, 10) == sig
        answer = await quick
        assert answer.status == 200 and await answer.text() == "done"
        with pytest.raises(aiohttp.ClientError):
            await stuck
    assert cancelled == ["30"]
    text = caplog.text
    assert f"test server: {sig.name} received" in text
    assert "waited for 2 in flight, 1 finished, 1 cut" in text
