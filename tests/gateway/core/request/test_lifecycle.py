"""The request lifecycle as the ext_proc picker drives it: the same object the proxy uses,
so the picker's bookkeeping gets the same guarantees (internal ids, one end, usage).

Exchanges are fed the protobuf messages Envoy sends, in process: the wire itself is
covered by tests/gateway/extproc; here only what a request holds matters.
"""

from __future__ import annotations

import asyncio

import orjson
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb

from inference_gateway.config.spec import FlowControlSpec, GatewayConfigSpec, SaturationSpec
from inference_gateway.core.request.contracts import RoutingState
from inference_gateway.core.request.director import Director
from inference_gateway.core.scheduling import Endpoint, PodMetrics, Scheduler
from inference_gateway.frontends.extproc.picker import Exchange, PickerOptions
from inference_gateway.frontends.extproc.wire import header_map

MODEL = "llama-3.1-8b"
OPEN = FlowControlSpec(  # admission out of the way
    saturation=SaturationSpec(
        queue_threshold=1e6,
        noncritical_queue_threshold=1e6,
        prefill_threshold_s=None,
        noncritical_prefill_threshold_s=None,
        critical_reserve_s=None,
    )
)


def director(**options: object) -> Director:
    pods = [
        Endpoint(f"p{i}", "10.0.0.1", 8000 + i, metrics=PodMetrics(), stale=False, models=[MODEL])
        for i in range(2)
    ]
    config = GatewayConfigSpec(flow_control=OPEN)
    return Director(lambda: pods, Scheduler(config), RoutingState.build(config), **options)  # type: ignore[arg-type]


def request_headers(request_id: str) -> pb.ProcessingRequest:
    headers = {":path": "/v1/completions", ":method": "POST", "x-request-id": request_id}
    return pb.ProcessingRequest(request_headers=pb.HttpHeaders(headers=header_map(headers)))


def request_body(**extra: object) -> pb.ProcessingRequest:
    body = orjson.dumps({"model": MODEL, "prompt": "hello " * 200, "max_tokens": 5, **extra})
    return pb.ProcessingRequest(request_body=pb.HttpBody(body=body, end_of_stream=True))


def response_headers(stream: bool) -> pb.ProcessingRequest:
    kind = "text/event-stream" if stream else "application/json"
    headers = {":status": "200", "content-type": kind}
    return pb.ProcessingRequest(response_headers=pb.HttpHeaders(headers=header_map(headers)))


def response_body(data: bytes, eos: bool) -> pb.ProcessingRequest:
    return pb.ProcessingRequest(response_body=pb.HttpBody(body=data, end_of_stream=eos))


def held(d: Director) -> dict[str, int]:
    pods = d.endpoints()
    return {
        "live": d.active,
        "in flight": sum(e.inflight for e in pods),
        "pending prefill": sum(e.prefill_tokens for e in pods),
    }


IDLE = {"live": 0, "in flight": 0, "pending prefill": 0}


async def decided(d: Director, request_id: str) -> Exchange:
    exchange = Exchange(d, PickerOptions(), asyncio.get_running_loop().time)
    await exchange.handle(request_headers(request_id))
    await exchange.handle(request_body())
    assert exchange.life is not None
    return exchange


async def test_exchanges_sharing_an_x_request_id_keep_their_own_bookkeeping() -> None:
    d = director()
    exchanges = [await decided(d, "same") for _ in range(10)]
    assert held(d)["live"] == 10 and held(d)["pending prefill"] > 0
    assert len({x.life.id for x in exchanges if x.life}) == 10  # ids the picker made
    for exchange in exchanges:
        await exchange.handle(response_headers(stream=False))
        await exchange.handle(response_body(b'{"usage": {"completion_tokens": 5}}', eos=True))
    assert held(d) == IDLE


async def test_a_stream_that_ends_before_the_response_is_a_client_cancel() -> None:
    d = director()
    exchange = await decided(d, "r")
    await exchange.handle(response_headers(stream=True))
    await exchange.handle(response_body(b'data: {"n": 1}\n\n', eos=False))
    exchange.cancel()  # Envoy closed the stream: its client left
    exchange.finish()  # the servicer's `finally` runs too: still one end
    assert held(d) == IDLE
    labels = {"model_name": MODEL, "target_model_name": MODEL}
    sample = d.metrics.registry.get_sample_value
    assert sample("inference_objective_request_cancelled_total", labels) == 1


async def test_streamed_usage_counts_once_the_response_ends() -> None:
    d = director()
    exchange = await decided(d, "r")
    await exchange.handle(response_headers(stream=True))
    await exchange.handle(response_body(b'data: {"n": 1}\n\n', eos=False))
    usage = b'data: {"usage": {"prompt_tokens": 300, "completion_tokens": 5}}\n\ndata: [DONE]\n\n'
    await exchange.handle(response_body(usage, eos=True))
    assert held(d) == IDLE
    labels = {"model_name": MODEL, "target_model_name": MODEL}
    sample = d.metrics.registry.get_sample_value
    assert sample("inference_objective_output_tokens_sum", labels) == 5


async def test_the_watchdog_ends_a_request_nobody_finishes() -> None:
    d = director(max_lifetime_s=0.05)
    await decided(d, "r")  # and then Envoy never sends the response
    assert held(d)["live"] == 1
    await asyncio.sleep(0.2)
    assert held(d) == IDLE


async def test_an_exchange_cancelled_while_queued_leaves_the_queue() -> None:
    """Envoy gone while the request waits for admission: the servicer's task is
    cancelled, and the request leaves the queue without reaching a pod."""
    d = director()
    saturated = FlowControlSpec(saturation=SaturationSpec(critical_reserve_s=None))
    d.reload(RoutingState.build(GatewayConfigSpec(flow_control=saturated)))
    for pod in d.endpoints():
        pod.metrics = PodMetrics(waiting=50)  # every pod full: standard requests queue
    exchange = Exchange(d, PickerOptions(), asyncio.get_running_loop().time)
    await exchange.handle(request_headers("r"))
    waiting = asyncio.create_task(exchange.handle(request_body()))
    await asyncio.sleep(0.05)
    assert sum(g.controller.queued() for g in d.gates.values()) == 1
    waiting.cancel()
    await asyncio.gather(waiting, return_exceptions=True)
    exchange.cancel()  # what the servicer does as the cancellation passes through
    assert sum(g.controller.queued() for g in d.gates.values()) == 0
    assert held(d) == IDLE and exchange.life is None
    await d.close()


async def test_each_decision_observes_the_age_of_the_picked_pods_view() -> None:
    """`igw_scrape_view_age_seconds`: the director's clock minus the picked pod's last
    good scrape, once a decision; a fresh scrape brings it back to 0."""
    now = [10.3]
    d = director(clock=lambda: now[0])
    for pod in d.endpoints():
        pod.scraped_at = 10.0
    await decided(d, "old")
    sample = d.metrics.registry.get_sample_value
    assert sample("igw_scrape_view_age_seconds_count") == 1
    assert abs(sample("igw_scrape_view_age_seconds_sum") - 0.3) < 1e-9  # type: ignore[operator]
    assert sample("igw_scrape_view_age_seconds_bucket", {"le": "0.25"}) == 0
    for pod in d.endpoints():
        pod.record_scrape(PodMetrics(), 10.3)
    await decided(d, "fresh")
    assert sample("igw_scrape_view_age_seconds_bucket", {"le": "0.01"}) == 1
    assert sample("igw_scrape_view_age_seconds_count") == 2
