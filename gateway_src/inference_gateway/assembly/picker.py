"""Assemble and run the picker: endpoint store, director, gRPC server, health, metrics.

`PickerServer` owns the moving parts of `igw picker` and starts and stops them in
order: collaborators (config, discovery) and scraping first, then gRPC, then the
metrics port. Discovery (a static list or a Kubernetes watch) and live config are
optional collaborators with a `start()` / `stop()` pair.

Readiness means "I can serve the protocol": SERVING once the config and the pools are
synced (`synced()`, and the lease when leader election is on), whatever the pod count.
With no ready pod the picker still answers by its flow-control rules (a request is held
in its band's queue until a pod is ready or the band's TTL passes: scale from zero), so
an Argo CD sync wave or a KEDA scale-up never waits on the picker waiting on the pods
(upstream's EPP is SERVING once its datastore has synced the pool, pods or not).

Stopping drains: readiness goes NOT_SERVING at once (the Service drops the replica) and
every HTTP/2 connection gets a graceful GOAWAY (`Http2GrpcServer.drain`): Envoy keeps
one long-lived connection per worker to the picker Service, which kube-proxy pinned to
this pod, so without it Envoy would go on opening every new stream here for the whole
grace period, and the pod could exit only by cutting them. The streams in flight run on
to their end; the listener stays open for what still arrives (a connection made before
the Service dropped the pod), and `drain(grace_s)` waits until the last ext_proc stream
ends, up to the grace; a stream is a request's whole life, response included, so the
grace is the route's timeout (the chart sets both). The log says how many streams it
waited for. (The grpcio transport has no GOAWAY short of stopping: it drains as before.)
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import grpc
from aiohttp import web
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1._async import HealthServicer
from prometheus_client import generate_latest

from inference_gateway.assembly.core import Core, build_core
from inference_gateway.assembly.kv_events import subscribe_pods
from inference_gateway.background import cancel_and_wait
from inference_gateway.config.spec import GatewayConfigSpec
from inference_gateway.core.endpoints.discovery import load_endpoints_file
from inference_gateway.core.endpoints.store import Fetch
from inference_gateway.core.request.decisions import DecisionLog
from inference_gateway.core.scheduling.config_checks import load_config
from inference_gateway.core.scheduling.types import Endpoint
from inference_gateway.core.traffic.rewrites import RewriteSet
from inference_gateway.frontends.explain_http import add_decisions_routes
from inference_gateway.frontends.extproc.picker import ExtProcServicer, PickerOptions
from inference_gateway.frontends.extproc.stream import max_message
from inference_gateway.frontends.status import add_status_route
from inference_gateway.telemetry.tracing import Tracing
from inference_gateway.transport.http2_server import (
    ConnectionPolicy,
    HealthService,
    Http2GrpcServer,
    Method,
)
from inference_gateway.transport.http_settings import server_settings
from inference_gateway.transport.listen import binding, check_free
from inference_gateway.transport.ports import DEFAULTS
from inference_gateway.transport.signals import drain, log_drained

__all__ = [
    "LIVENESS_SERVICE",
    "PROCESS_PATH",
    "READINESS_SERVICE",
    "SERVICE_NAME",
    "TRANSPORTS",
    "Lifecycle",
    "PickerServer",
    "build_picker",
]

log = logging.getLogger(__name__)

SERVICE_NAME = "envoy.service.ext_proc.v3.ExternalProcessor"
# The health service names of the endpoint-picker protocol: `liveness` answers SERVING for as
# long as the process runs (a model outage, a scale-from-zero or a standby replica must never
# restart the picker), `readiness` once config and pools are synced (and while it holds the
# lease when leader election is on), never by pod count. The empty name and the ext_proc
# service follow readiness.
LIVENESS_SERVICE = "liveness"
READINESS_SERVICE = "readiness"
READINESS_NAMES = ("", SERVICE_NAME, READINESS_SERVICE)
PROCESS_PATH = f"/{SERVICE_NAME}/Process"
# `http2`: our own HTTP/2 server (transport/http2_server.py), the fast path; `grpcio`: grpc.aio.
TRANSPORTS = ("http2", "grpcio")


class Lifecycle(Protocol):
    async def start(self) -> None: ...
    async def stop(self) -> None: ...


@runtime_checkable
class Handover(Protocol):
    """A collaborator that hands something over when the picker starts draining (the
    Lease of leader election: a standby takes over while this replica drains)."""

    async def release(self) -> None: ...


class PickerServer:
    """The running picker over a core (`assembly.core.build_core`); `await start()`,
    then `port` is the bound gRPC port."""

    def __init__(
        self,
        core: Core,
        *,
        options: PickerOptions | None = None,
        host: str = "127.0.0.1",
        grpc_port: int = 9002,
        metrics_port: int | None = DEFAULTS["igw picker", "--metrics-port"],
        credentials: grpc.ServerCredentials | None = None,
        ssl_context: ssl.SSLContext | None = None,
        transport: str = "http2",
        collaborators: list[Lifecycle] | None = None,
        is_leader: Callable[[], bool] = lambda: True,
        synced: Callable[[], bool] = lambda: True,
        health_interval_s: float = 0.2,
        health_port: int | None = None,
        policy: ConnectionPolicy | None = None,
        status: dict[str, Any] | None = None,
    ) -> None:
        self.core = core
        self.store = core.store
        self.director = director = core.director
        if transport not in TRANSPORTS:
            raise ValueError(f"transport must be one of {TRANSPORTS}, not {transport!r}")
        if transport == "http2" and credentials is not None:
            raise ValueError("the http2 transport takes TLS as ssl_context, not gRPC credentials")
        self.transport = transport
        self.tracing = Tracing.off()  # built at start, from the config synced by then
        self.servicer = ExtProcServicer(director, options, tracing=self.tracing)
        # every stream asks the engine for `usage`; the exchange takes the usage event out
        # of a stream whose client did not ask (picker.py), as igw serve does
        director.ask_stream_usage = True
        self.health: Any = HealthServicer() if transport == "grpcio" else HealthService()
        self.host = host
        self.grpc_port = grpc_port
        self.metrics_port = metrics_port
        self.credentials = credentials
        self.ssl_context = ssl_context
        # and the pods' KV events, for a precise prefix scorer (assembly/kv_events.py)
        kv_events = subscribe_pods(
            core.metrics.registry, lambda: core.store.endpoints, lambda: core.director.scheduler
        )
        self.collaborators = [*(collaborators or []), kv_events]
        self.is_leader = is_leader
        self.synced = synced  # config and pool discovery have synced (Kubernetes: listed)
        self.started = False  # collaborators started and the first scrape done
        self.draining = False
        self.health_interval_s = health_interval_s
        self.health_port = health_port
        self.health_bound = 0
        self._health_server: grpc.aio.Server | Http2GrpcServer | None = None
        self.policy = policy
        self.status = status  # `cluster`, `hourly_cost_usd`: serve GET /status beside /metrics
        self.port = 0
        self.metrics_bound = 0
        self.serving = False
        self._server: grpc.aio.Server | Http2GrpcServer | None = None
        self._runner: web.AppRunner | None = None
        self._tasks: list[asyncio.Task[None]] = []

    def apply_config(self, config: GatewayConfigSpec | None, rewrites: RewriteSet) -> None:
        """Swap in a validated config (`Core.apply_config`)."""
        self.core.apply_config(config, rewrites)

    async def start(self) -> None:
        for part in self.collaborators:
            await part.start()
        # traces and the decision log as the config says once its source has started (a
        # later reload keeps what it has: tracing settings take effect at start)
        settings = self.core.config.tracing
        self.tracing = self.servicer.tracing = Tracing.build(settings, "igw-picker")
        recent = settings.explain.recent
        log = self.director.decisions
        if log is None or log.capacity != recent:
            self.director.decisions = DecisionLog(recent) if recent else None
        self.director.explaining = self.director.decisions is not None or self.tracing.enabled
        await self.store.scrape_once()
        self.store.start()
        self.started = True
        await self.update_health()
        if self.transport == "http2":
            await self._start_http2()
        else:
            await self._start_grpcio()
        self._tasks.append(asyncio.get_running_loop().create_task(self._health_loop()))
        if self.health_port is not None:
            await self._start_health_port()
        if self.metrics_port is not None:
            await self._start_metrics()

    async def _start_http2(self) -> None:
        # An ext_proc message carries at most one body (or chunk) plus headers: the
        # body limit and room for the rest; anything larger is RESOURCE_EXHAUSTED
        # before it is buffered.
        process = Method(self.servicer.serve_call, max_message=self._max_message())
        handlers = {PROCESS_PATH: process, **self.health.handlers()}
        server = Http2GrpcServer(handlers, ssl_context=self.ssl_context, policy=self.policy)
        self.port = await server.start(self.host, self.grpc_port)
        self._server = server

    def _max_message(self) -> int:
        return max_message(self.servicer.options.max_body_bytes)

    async def _start_grpcio(self) -> None:
        # The same limits as the http2 transport, where grpc core has them.
        policy = self.policy or ConnectionPolicy()
        server = grpc.aio.server(
            options=[
                ("grpc.so_reuseport", 0),
                ("grpc.max_receive_message_length", self._max_message()),
                ("grpc.max_concurrent_streams", policy.max_concurrent_streams),
                ("grpc.keepalive_time_ms", int(policy.keepalive_s * 1000)),
                ("grpc.keepalive_timeout_ms", int(policy.keepalive_timeout_s * 1000)),
                ("grpc.max_connection_idle_ms", int(policy.idle_timeout_s * 1000)),
            ]
        )
        # Raw bytes in and out (no (de)serializers): the shared driver parses them, as on
        # the http2 transport.
        process: grpc.RpcMethodHandler[bytes, bytes] = grpc.stream_stream_rpc_method_handler(
            self.servicer.Process
        )
        server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(SERVICE_NAME, {"Process": process}),)
        )
        health_pb2_grpc.add_HealthServicer_to_server(self.health, server)
        address = f"{self.host}:{self.grpc_port}"
        check_free(self.host, self.grpc_port)  # grpcio says little when it cannot bind
        with binding(self.host, self.grpc_port):
            if self.credentials is not None:
                self.port = server.add_secure_port(address, self.credentials)
            else:
                self.port = server.add_insecure_port(address)
        await server.start()
        self._server = server

    async def _start_health_port(self) -> None:
        """gRPC health alone, in plain text, on its own port: the kubelet's gRPC probe
        cannot speak TLS, while the ext_proc port may (upstream's picker splits its
        `--grpc-port` and `--grpc-health-port` the same way)."""
        assert self.health_port is not None
        if self.transport == "grpcio":
            aio = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
            health_pb2_grpc.add_HealthServicer_to_server(self.health, aio)
            check_free(self.host, self.health_port)
            with binding(self.host, self.health_port):
                self.health_bound = aio.add_insecure_port(f"{self.host}:{self.health_port}")
            await aio.start()
            self._health_server = aio
        else:
            http2 = Http2GrpcServer(self.health.handlers(), policy=self.policy)
            self.health_bound = await http2.start(self.host, self.health_port)
            self._health_server = http2

    async def update_health(self) -> None:
        """Readiness: SERVING once started and synced (and, with leader election, while
        leading), never NOT_SERVING for want of pods; NOT_SERVING for good once draining.
        Liveness: SERVING from the first call on, whatever the pods or the lease."""
        serving = self.ready()
        if serving == self.serving and self._server is not None:
            return
        await self.health.set(LIVENESS_SERVICE, health_pb2.HealthCheckResponse.SERVING)
        self.serving = serving
        status = (
            health_pb2.HealthCheckResponse.SERVING
            if serving
            else health_pb2.HealthCheckResponse.NOT_SERVING
        )
        for service in READINESS_NAMES:
            await self.health.set(service, status)

    def ready(self) -> bool:
        """Whether the picker can serve the protocol now (what `readiness` says)."""
        return self.started and not self.draining and self.synced() and self.is_leader()

    async def _health_loop(self) -> None:
        """Readiness, and idle rate-limit buckets swept, every `health_interval_s`. The
        pool gauges are not refreshed here: whatever reads them computes them first
        (`/metrics`, the EMF emitter, `/status`). Refreshed here every 0.2 s, 100 pools of
        1,024 pods held the loop 2-3 ms each time, a stall every request behind it sat
        out (`bench/scale.py`)."""
        while True:
            await asyncio.sleep(self.health_interval_s)
            self.director.sweep_idle()
            await self.update_health()

    async def _start_metrics(self) -> None:
        async def metrics(request: web.Request) -> web.Response:
            self.director.refresh_gauges(self.store.pools())
            return web.Response(
                body=generate_latest(self.director.metrics.registry),
                content_type="text/plain",
                charset="utf-8",
            )

        app = web.Application()
        app.router.add_get("/metrics", metrics)
        if self.status is not None:  # the global router's heartbeat (frontends/status.py)
            add_status_route(app, self.director, self.store, **self.status)
        # `igw explain` (loopback: kubectl port-forward), frontends/explain_http.py
        add_decisions_routes(app, lambda: self.director.decisions)
        self._runner = web.AppRunner(app, access_log=None, **server_settings())
        await self._runner.setup()
        assert self.metrics_port is not None
        site = web.TCPSite(self._runner, self.host, self.metrics_port)
        with binding(self.host, self.metrics_port):
            await site.start()
        self.metrics_bound = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def drain(self, grace_s: float) -> int:
        """Readiness NOT_SERVING at once, then wait (serving whatever still arrives) until
        no ext_proc stream is open, up to `grace_s`: the shared drain and its log line
        (transport/signals.py), plus how many streams arrived meanwhile. Returns how many
        it waited for."""
        self.draining = True
        await self.update_health()
        if isinstance(self._server, Http2GrpcServer):
            self._server.drain()  # Envoy opens its next streams on another connection
        for part in self.collaborators:
            if isinstance(part, Handover):
                await part.release()
        servicer = self.servicer
        opened = servicer.opened
        log.info("draining: readiness NOT_SERVING, GOAWAY sent (up to %g s)", grace_s)
        drained = await drain(lambda: servicer.active, grace_s)
        log_drained("igw picker", drained)
        if servicer.opened != opened:
            log.info("%d streams arrived while draining", servicer.opened - opened)
        return drained.waited_for

    async def stop(self, grace_s: float = 1.0) -> None:
        """Stop everything; `grace_s` is how long open ext_proc streams may still run
        (see `drain`, which `igw picker` calls first on SIGTERM)."""
        for task in self._tasks:
            await cancel_and_wait(task)
        self._tasks.clear()
        if self._server is not None:
            await self.health.enter_graceful_shutdown()
            await self._server.stop(grace_s)
            self._server = None
        if self._health_server is not None:
            await self._health_server.stop(0)
            self._health_server = None
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        await self.core.close()
        for part in reversed(self.collaborators):
            await part.stop()
        await self.tracing.close()

    async def wait(self) -> None:
        if isinstance(self._server, grpc.aio.Server):
            await self._server.wait_for_termination()
        elif self._server is not None:
            await self._server.wait_closed()


def build_picker(
    endpoints: list[Endpoint] | str | Path | None,
    config: GatewayConfigSpec | str | Path | None = None,
    *,
    fetch: Fetch | None = None,
    options: PickerOptions | None = None,
    rewrites: RewriteSet | None = None,
    **server_kwargs: Any,
) -> PickerServer:
    """A picker over a static endpoint list (or an empty store that discovery fills).

    `fetch` is the store's scrape seam (default: HTTP to each pod).
    """
    if endpoints is not None and not isinstance(endpoints, list):
        endpoints = load_endpoints_file(endpoints)
    if config is not None and not isinstance(config, GatewayConfigSpec):
        config = load_config(config)
    core = build_core(list(endpoints or []), config, fetch=fetch, rewrites=rewrites)
    return PickerServer(core, options=options, **server_kwargs)
