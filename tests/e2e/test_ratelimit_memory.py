"""Rate-limit state is bounded (issue 23, defect 2), measured on a real `igw serve`.

Before: every distinct bearer token left a bucket keyed by the token itself, never
pruned (+25.3 MB of RSS for 3,000 distinct 8 KB tokens, nothing freed minutes later).
Now buckets are keyed by a 16-byte digest and dropped once their window has passed.

10,000 requests, each with its own 8,000-character bearer token, against a 30 s window
(nearly all of them live at once at the end of the burst); once the window has passed
(and `/metrics` has been read: that sweeps), the process's RSS (VmRSS from /proc) is
within 5 MB of where it stood after a warm-up, and the bucket gauge is back to the one
steady client. The pool's only pod is down, so each request is charged
(its bucket made) and answered 503 at once: the test measures the gateway, not a pod.
"""

from __future__ import annotations

import asyncio
import secrets
from pathlib import Path

import aiohttp
from aiohttp import web

from .serve_process import ServeProcess, igw_serve

MODEL = "llama-3.1-8b"
#: long enough that a burst of 10,000 on a loaded machine (about 20 s seen) ends before
#: its first buckets expire, so the peak counts every client
WINDOW_S = 30
CONFIG = {
    "pools": [{"name": "p"}],
    "models": [{"name": MODEL, "pool": "p"}],
    "rateLimits": [{"requestsPerMinute": 5, "tokensPerMinute": 100_000, "windowS": WINDOW_S}],
    # the decision log (igw explain) is bounded too: full after the warm-up, so it must
    # not grow past its bound during the measure
    "tracing": {"explain": {"recent": 1000}},
}
BODY = b'{"model": "llama-3.1-8b", "prompt": "hi", "max_tokens": 4}'
ANSWER = {"choices": [{"text": "ok"}], "usage": {"prompt_tokens": 1, "completion_tokens": 1,
                                                 "total_tokens": 2}}  # fmt: skip


async def instant_pod() -> tuple[web.AppRunner, int]:
    async def metrics(_: web.Request) -> web.Response:
        return web.Response(text="vllm:num_requests_waiting 0\nvllm:num_requests_running 0\n")

    async def models(_: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": MODEL}]})

    async def complete(request: web.Request) -> web.Response:
        await request.read()
        return web.json_response(ANSWER)

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/completions", complete)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]


async def send(served: ServeProcess, tokens: list[str], concurrency: int = 32) -> dict[int, int]:
    statuses: dict[int, int] = {}
    queue = iter(tokens)
    async with aiohttp.ClientSession() as client:

        async def worker() -> None:
            for token in queue:
                headers = {"authorization": f"Bearer {token}"}
                async with client.post(
                    served.url + "/v1/completions", data=BODY, headers=headers
                ) as r:
                    await r.read()
                    statuses[r.status] = statuses.get(r.status, 0) + 1

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return statuses


async def buckets(served: ServeProcess) -> float:
    async with aiohttp.ClientSession() as client, client.get(served.url + "/metrics") as r:
        for line in (await r.text()).splitlines():
            if line.startswith("igw_ratelimit_buckets "):
                return float(line.split()[1])
    raise AssertionError("no igw_ratelimit_buckets")


def distinct_tokens(n: int) -> list[str]:
    return [secrets.token_hex(4000) for _ in range(n)]  # 8,000 characters each


async def settle_windows(served: ServeProcess) -> None:
    """Let every window pass; one steady client's requests sweep as they come, and
    reading `/metrics` sweeps the rest (an idle gateway lets go too)."""
    await asyncio.sleep(WINDOW_S + 0.5)
    await send(served, ["steady"] * 20, concurrency=4)
    await buckets(served)


async def test_ten_thousand_distinct_tokens_leave_rss_where_it_was(tmp_path: Path) -> None:
    pod, port = await instant_pod()
    try:
        await measure(tmp_path, port)
    finally:
        await pod.cleanup()


async def measure(tmp_path: Path, port: int) -> None:
    async with igw_serve(tmp_path, [port], config=CONFIG) as served:
        # the warm-up is as large as the measure, so the allocator's arenas and every
        # bounded structure reach their high-water mark first; a leak still shows as a
        # second 10,000 clients' worth of state (about 80 MB before the fix)
        assert (await send(served, distinct_tokens(10_000))) == {200: 10_000}
        await settle_windows(served)
        before = served.rss_kib()
        statuses = await send(served, distinct_tokens(10_000))
        assert statuses == {200: 10_000}
        peak_buckets = await buckets(served)
        await settle_windows(served)
        after = served.rss_kib()
        left = await buckets(served)
    assert peak_buckets >= 5_000  # one bucket per client (requests and tokens in one)
    assert left <= 1  # the steady client's
    assert after - before <= 5 * 1024, f"RSS grew {after - before} KiB ({before} → {after})"
