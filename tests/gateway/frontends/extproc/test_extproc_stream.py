"""The shared ext_proc stream driver (frontends/extproc/stream.py) as `igw bbr` runs it,
over real gRPC on loopback (issue 31 finding 2, issue 36's one stream loop).

What a stream holds of a body still arriving is bounded by the server's budget, given
back the moment the stream is cancelled, and freed with it without waiting for the
cyclic garbage collector (the router once kept each stream in a reference cycle, so 20
cancelled 16 MiB uploads stayed in memory in an idle server). The through-Envoy memory
bound is tests/e2e/envoy/test_envoy_bbr_hostile.py.
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Callable, Iterator

import orjson
import pytest
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from fake_envoy import ExchangeStream, FakeEnvoy, request_headers_message

from inference_gateway.frontends import bbr
from inference_gateway.frontends.bbr import start_bbr
from inference_gateway.frontends.extproc.stream import BodyBudget

MIB = 2**20


def chunk(data: bytes, end: bool = False) -> pb.ProcessingRequest:
    return pb.ProcessingRequest(request_body=pb.HttpBody(body=data, end_of_stream=end))


def live_exchanges() -> int:
    return sum(1 for o in gc.get_objects() if type(o) is bbr._Exchange)


@pytest.fixture
def no_cyclic_gc() -> Iterator[None]:
    """Only reference counting frees objects here, as in a server with nothing else to
    allocate (CPython's cyclic collector runs on allocations, not on time)."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


async def until(condition: Callable[[], bool], what: str, timeout_s: float = 10.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not condition():
            await asyncio.sleep(0.01)
    assert condition(), what


@pytest.mark.usefixtures("no_cyclic_gc")
async def test_idle_uploads_hold_at_most_the_budget_and_cancelled_ones_free_it() -> None:
    budget = BodyBudget(8 * MIB)
    server, port = await start_bbr(None, host="127.0.0.1", port=0, budget=budget)
    try:
        async with FakeEnvoy(f"127.0.0.1:{port}") as envoy:
            streams: list[ExchangeStream] = []
            for _ in range(20):  # twenty uploads of 3 MiB that stop before their end
                stream = envoy.open()
                await stream.send(request_headers_message("/v1/completions"))
                for _ in range(3):
                    await stream.send(chunk(b"x" * MIB))
                streams.append(stream)
            await until(lambda: sum(s.refused() for s in streams) == 18, "18 refused")
            assert budget.held == 6 * MIB  # two uploads fit whole; no more is kept
            for stream in streams:
                answer = stream.received[-1] if stream.received else None
                if answer is not None:
                    assert answer.immediate_response.status.code == 503
                    error = orjson.loads(answer.immediate_response.body)["error"]
                    assert error["code"] == "server_busy"
            for stream in streams:
                stream.cancel()
            await until(lambda: budget.held == 0, f"still held: {budget.held}")
            await until(lambda: live_exchanges() == 0, "a cancelled stream was not freed")
            # the whole budget serves again: a complete 4 MiB body goes through
            stream = envoy.open()
            body = orjson.dumps({"model": "m", "prompt": "x" * (4 * MIB - 64)})
            out = await envoy.send_request(stream, "/v1/completions", body, chunk_size=MIB)
            await stream.close()
            assert out.upstream_body == body
            assert budget.held == 0
    finally:
        await server.stop(0)


async def test_a_body_past_the_cap_is_the_pickers_413_and_nothing_stays_held() -> None:
    budget = BodyBudget()
    server, port = await start_bbr(None, host="127.0.0.1", port=0, budget=budget)
    try:
        async with FakeEnvoy(f"127.0.0.1:{port}") as envoy:
            stream = envoy.open()
            body = b'{"model": "m", "prompt": "' + b"x" * (5 * MIB) + b'"}'
            out = await envoy.send_request(stream, "/v1/completions", body, chunk_size=MIB)
            answer = out.messages[-1].immediate_response
            assert answer.status.code == 413
            assert orjson.loads(answer.body) == {
                "error": {
                    "message": f"Request body exceeds {4 * MIB} bytes.",
                    "type": "invalid_request_error",
                    "param": None,
                    "code": "request_too_large",
                }
            }
            assert budget.held == 0
    finally:
        await server.stop(0)
