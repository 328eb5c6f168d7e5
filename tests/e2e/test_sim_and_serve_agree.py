"""The simulator and `igw serve` make the same pod choices: one trace, one config, one
set of metric snapshots, through the same director, request by request.

A seeded trace of events (a request arrives, produces its first token, finishes; the
pods' `/metrics` pages change and are scraped) is replayed twice:

* through the simulator's `gateway` policy (`sim/gateway.py`) on its virtual clock, the
  way `igw simulate` drives it (`route` → pod, `on_first_token`, `on_finished`, scrapes
  recorded with `Endpoint.record_scrape`), which also writes the trace: a request
  whose band would have to wait in the admission queue is sent as `sheddable`, so it is
  refused at once (a queued request's release order is the one thing the two drivers
  reach by different timings: a ticker against engine steps);
* through a real `igw serve` app on loopback (`build_gateway`, the same config, a clock
  the test sets to each event's time), the official openai SDK as the client, and four
  model-server pods that serve the trace's `/metrics` pages and hold each answer until
  the trace says its first token and its end come; the store scrapes them over HTTP.

Both see the same bodies (the simulator reads them with `Intake.parse`, as the director
reads a client's), so the token estimate and the prefix hashes are the same; the
workload-to-`Intake` step of `igw simulate` (token counts, shared-prefix block ids) is
the only part not replayed here. After every event, the pods' bookkeeping (requests
sent since the scrape, in flight, pending prefill tokens, learned prefill speed) must be
equal too, and the trace must exercise every path: prefix sharing, an adapter, the three
bands, refusals.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import openai
import orjson
from aiohttp import web

from inference_gateway.assembly.serve import app_runner, build_gateway
from inference_gateway.config.spec import GatewayConfigSpec
from inference_gateway.core.endpoints.adapters import parse_metrics
from inference_gateway.core.request.director import OBJECTIVE_HEADER, Intake
from inference_gateway.core.scheduling.types import Endpoint
from inference_gateway.frontends.proxy import Gateway
from inference_gateway.sim.gateway import GatewayPolicy, simulated_config
from inference_gateway.sim.pods import build_fleet
from inference_gateway.sim.policies import DEFERRED
from inference_gateway.sim.scenario import PoolSpec
from inference_gateway.sim.workload import SimRequest

SEED = 11
MODEL, ADAPTER = "llama-3.1-8b", "sql-lora"
PODS = 4
SERVES_ADAPTER = {0, 1}
REQUESTS = 64
SYSTEM_PROMPTS = [f"system prompt {k}: " + "be brief and exact. " * 40 for k in range(3)]


@dataclasses.dataclass
class Event:
    kind: str  # send | first | finish | scrape
    t: float
    request: int = -1
    body: dict[str, Any] | None = None
    band: str = "standard"
    pages: list[str] | None = None


def page(rnd: random.Random) -> str:
    """One pod's `/metrics`, vLLM's names (mostly idle, sometimes full)."""
    waiting = rnd.choice([0, 0, 0, 0, 1, 2, 6])
    kv = rnd.choice([0.05, 0.2, 0.4, 0.7, 0.9])
    adapters = rnd.choice(["", ADAPTER])
    return (
        f'vllm:num_requests_waiting{{model_name="{MODEL}"}} {waiting}.0\n'
        f'vllm:num_requests_running{{model_name="{MODEL}"}} {rnd.randrange(9)}.0\n'
        f'vllm:kv_cache_usage_perc{{model_name="{MODEL}"}} {kv}\n'
        'vllm:cache_config_info{block_size="16",num_gpu_blocks="20000"} 1.0\n'
        f'vllm:lora_requests_info{{max_lora="2",running_lora_adapters="{adapters}",'
        'waiting_lora_adapters=""} 1.7e+09\n'
    )


def served(i: int) -> frozenset[str]:
    return frozenset({MODEL, ADAPTER} if i in SERVES_ADAPTER else {MODEL})


def endpoints(ports: list[int]) -> list[Endpoint]:
    labels = {"igw.dev/gpu": "H100", "igw.dev/pool": "sim", "igw.dev/model": MODEL}
    return [
        Endpoint(f"pod-{i}", "127.0.0.1", port, pool="sim", labels=dict(labels), index=i)
        for i, port in enumerate(ports)
    ]


def state(eps: list[Endpoint]) -> list[tuple[Any, ...]]:
    """What the scheduler and admission keep per pod."""
    return [
        (e.name, e.sent_requests, e.inflight, e.prefill_tokens, e.prefill_s_per_token) for e in eps
    ]


class Simulated:
    """The simulator's driver of the director over the trace's pods."""

    def __init__(self, config: GatewayConfigSpec, ports: list[int]) -> None:
        pool = PoolSpec(name="sim", gpu="H100", model=MODEL, replicas=PODS)
        pods = build_fleet([pool], listener=None)  # type: ignore[arg-type]  # no engine runs
        for pod, endpoint in zip(pods, endpoints(ports), strict=True):
            endpoint.models = served(pod.index)
            pod.endpoint = endpoint
        self.pods = pods
        self.policy = GatewayPolicy("gateway", pods, SEED, config)
        self.requests: dict[int, tuple[SimRequest, Any]] = {}

    def scrape(self, pages: list[str], t: float) -> None:
        for pod, text in zip(self.pods, pages, strict=True):
            pod.endpoint.record_scrape(parse_metrics(text), t)

    def send(self, i: int, body: dict[str, Any], band: str, t: float) -> str | None:
        request = SimRequest(t, 0, 16, priority=band, request_id=i)
        pod = self.policy.submit(request, Intake.parse(orjson.dumps(body)), t)
        assert pod is not DEFERRED  # the trace never queues (see the module docstring)
        self.requests[i] = (request, pod)
        return None if pod is None else pod.endpoint.name

    def would_queue(self, band: str, t: float) -> bool:
        gate = self.policy.director.gates["*"]
        return gate.controller.full(band, gate.endpoints(), t)

    def first(self, i: int, t: float) -> None:
        request, pod = self.requests[i]
        self.policy.on_first_token(request, pod, t - request.t, t)

    def finish(self, i: int, t: float) -> None:
        request, pod = self.requests[i]
        self.policy.on_finished(request, pod, t)


def trace(sim: Simulated) -> tuple[list[Event], list[str | None], list[Any]]:
    """The seeded trace, written while the simulator runs it: events, its picks (None:
    refused) and the pods' bookkeeping after each event."""
    rnd = random.Random(SEED)
    events: list[Event] = []
    picks: list[str | None] = []
    states: list[Any] = []
    waiting_first: list[int] = []
    streaming: list[int] = []
    t = 1.0

    def emit(event: Event) -> None:
        events.append(event)
        if event.kind == "scrape":
            assert event.pages is not None
            sim.scrape(event.pages, event.t)
        elif event.kind == "send":
            assert event.body is not None
            pick = sim.send(event.request, event.body, event.band, event.t)
            picks.append(pick)
            if pick is not None:
                waiting_first.append(event.request)
        elif event.kind == "first":
            sim.first(event.request, event.t)
        else:
            sim.finish(event.request, event.t)
        states.append(state(sim.policy.endpoints))

    emit(Event("scrape", t, pages=[page(rnd) for _ in range(PODS)]))
    sent = 0
    while sent < REQUESTS or waiting_first or streaming:
        t = round(t + rnd.uniform(0.005, 0.25), 6)
        roll = rnd.random()
        if roll < 0.07:
            emit(Event("scrape", t, pages=[page(rnd) for _ in range(PODS)]))
        elif roll < 0.5 and sent < REQUESTS:
            band = rnd.choice(["standard"] * 3 + ["critical", "sheddable"])
            if band != "sheddable" and sim.would_queue(band, t):
                band = "sheddable"  # refused at once instead of queued
            prompt = rnd.choice(SYSTEM_PROMPTS) + f"question {sent}: " + "why? " * rnd.randrange(60)
            body = {
                "model": ADAPTER if rnd.random() < 0.2 else MODEL,
                "prompt": prompt,
                "max_tokens": 16,
                "stream": True,
                "user": str(sent),
            }
            emit(Event("send", t, sent, body, band))
            sent += 1
        elif roll < 0.78 and waiting_first:
            i = waiting_first.pop(rnd.randrange(len(waiting_first)))
            streaming.append(i)
            emit(Event("first", t, i))
        elif streaming:
            emit(Event("finish", t, streaming.pop(rnd.randrange(len(streaming)))))
    return events, picks, states


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Pods:
    """Four model servers on loopback: the trace's pages, answers held until told."""

    def __init__(self) -> None:
        self.pages = [""] * PODS
        self.arrived: dict[int, asyncio.Future[str]] = {}
        self.first: dict[int, asyncio.Event] = {}
        self.finish: dict[int, asyncio.Event] = {}
        self.ports: list[int] = []

    def expect(self, i: int) -> None:
        self.arrived[i] = asyncio.get_running_loop().create_future()
        self.first[i], self.finish[i] = asyncio.Event(), asyncio.Event()

    def app(self, index: int) -> web.Application:
        async def metrics(request: web.Request) -> web.Response:
            return web.Response(text=self.pages[index])

        async def models(request: web.Request) -> web.Response:
            data = [{"id": m, "object": "model"} for m in sorted(served(index))]
            return web.json_response({"object": "list", "data": data})

        async def completions(request: web.Request) -> web.StreamResponse:
            body = await request.json()
            i = int(body["user"])
            self.arrived[i].set_result(f"pod-{index}")
            await self.first[i].wait()
            response = web.StreamResponse(headers={"content-type": "text/event-stream"})
            await response.prepare(request)
            chunk = {
                "id": f"cmpl-{i}",
                "object": "text_completion",
                "created": 0,
                "model": body["model"],
                "choices": [{"index": 0, "text": "ok", "finish_reason": None}],
            }
            await response.write(b"data: " + orjson.dumps(chunk) + b"\n\n")
            await self.finish[i].wait()
            await response.write(b"data: [DONE]\n\n")
            await response.write_eof()
            return response

        app = web.Application()
        app.router.add_get("/metrics", metrics)
        app.router.add_get("/v1/models", models)
        app.router.add_post("/v1/completions", completions)
        return app

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        runners = []
        try:
            for i in range(PODS):
                runner = web.AppRunner(self.app(i), handler_cancellation=True)
                await runner.setup()
                site = web.TCPSite(runner, "127.0.0.1", 0)
                await site.start()
                runners.append(runner)
                self.ports.append(site._server.sockets[0].getsockname()[1])  # type: ignore[union-attr]
            yield
        finally:
            for runner in runners:
                await runner.cleanup()


async def until(check: Callable[[], bool], what: str, timeout_s: float = 10.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not check():
            await asyncio.sleep(0.001)
    assert check(), what


def ttft_count(gateway: Gateway) -> float:
    return sum(
        s.value
        for metric in gateway.metrics.registry.collect()
        for s in metric.samples
        if s.name == "inference_objective_request_ttft_seconds_count"
    )


async def serve_replay(
    events: list[Event], pods: Pods, config: GatewayConfigSpec, expected: list[Any]
) -> tuple[list[str | None], list[Any]]:
    """The trace through `igw serve`: its picks and the pods' bookkeeping per event, up
    to the first event whose bookkeeping differs from `expected` (the simulator's)."""
    clock = Clock()
    clock.now = events[0].t
    pods.pages = list(events[0].pages or [])
    app, gateway = build_gateway(endpoints(pods.ports), config, seed=SEED, clock=clock)
    runner = app_runner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    store = gateway.store
    await until(lambda: store.scrapes >= 2, "the startup scrapes")
    await store.stop()  # from here on the store scrapes when the trace says
    client = openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="k", max_retries=0)
    picks: list[str | None] = []
    states = [state(store.endpoints)]
    calls: list[asyncio.Task[str]] = []
    firsts = 0

    async def call(body: dict[str, Any], band: str) -> str:
        try:
            stream = await client.completions.create(
                model=body["model"],
                prompt=body["prompt"],
                max_tokens=body["max_tokens"],
                stream=True,
                user=body["user"],
                extra_headers={OBJECTIVE_HEADER: band},
            )
        except openai.APIStatusError as error:
            return str(error.status_code)
        async for _ in stream:
            pass
        return "ok"

    try:
        for event in events[1:]:
            clock.now = event.t
            if event.kind == "scrape":
                pods.pages = list(event.pages or [])
                await store.scrape_once()
            elif event.kind == "send":
                assert event.body is not None
                i = event.request
                pods.expect(i)
                task = asyncio.create_task(call(event.body, event.band))
                calls.append(task)
                await asyncio.wait(
                    [task, pods.arrived[i]], timeout=5, return_when=asyncio.FIRST_COMPLETED
                )
                if pods.arrived[i].done():
                    picks.append(pods.arrived[i].result())
                elif task.done():
                    picks.append(None if task.result() == "429" else task.result())
                else:  # waiting in the admission queue, where the simulator never was
                    picks.append("queued")
            elif event.kind == "first":
                pods.first[event.request].set()
                firsts += 1
                await until(lambda n=firsts: ttft_count(gateway) == n, "a first token counted")
            else:
                live = len(gateway.director.live) - 1
                pods.finish[event.request].set()
                await until(lambda n=live: len(gateway.director.live) == n, "a request ended")
            states.append(state(store.endpoints))
            if states[-1] != expected[len(states) - 1]:
                break  # diverged: what follows would only wait for what never comes
    finally:
        for event in pods.first.values():
            event.set()
        for event in pods.finish.values():
            event.set()
        for task in calls:
            task.cancel()
        await asyncio.gather(*calls, return_exceptions=True)
        await client.close()
        await runner.cleanup()
    return picks, states


async def test_simulator_and_igw_serve_pick_the_same_pods() -> None:
    config = simulated_config(GatewayConfigSpec())
    pods = Pods()
    async with pods.running():
        events, sim_picks, sim_states = trace(Simulated(config, pods.ports))
        serve_picks, serve_states = await serve_replay(events, pods, config, sim_states)
    sends = [e for e in events if e.kind == "send"]
    bands = {e.band for e in sends}
    print(f"\n{len(events)} events, {len(sends)} requests, picks: {sim_picks}")
    # the trace reaches every path it claims to
    assert bands == {"standard", "critical", "sheddable"}
    assert None in sim_picks and len({p for p in sim_picks if p}) == PODS
    assert any(e.body and e.body["model"] == ADAPTER for e in sends)
    adapter_picks = [p for e, p in zip(sends, sim_picks, strict=True) if e.body["model"] == ADAPTER]  # type: ignore[index]
    assert adapter_picks and all(p in {None, "pod-0", "pod-1"} for p in adapter_picks)
    # the claim: the same choices, request by request, and the same bookkeeping
    assert serve_states == sim_states
    assert serve_picks == sim_picks
