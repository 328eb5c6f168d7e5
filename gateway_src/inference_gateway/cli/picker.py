"""`igw picker`: the Envoy ext_proc endpoint picker.

    igw picker --endpoints ENDPOINTS.yaml [--config CONFIG.yaml] [--rewrites PATH]
               [--grpc-port 9002] [--metrics-port 9005] [--tls | --tls-cert F --tls-key F]

Without `--endpoints` the pods come from Kubernetes: the pools of the config (label
selector and target port) and/or the InferencePool named by `--pool`, in `--namespace`
(default: $POD_NAMESPACE). In that mode InferenceGatewayConfig, InferenceObjective and
InferenceModelRewrite resources are watched too (`--no-watch-api` turns that off); with
a static endpoints file, the config and rewrites files are reloaded when they change.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import ssl
from pathlib import Path
from typing import Any

from inference_gateway.cli.process import settle_collector, start_server_process
from inference_gateway.transport.ports import DEFAULTS

__all__ = [
    "add_store_argument",
    "kubernetes_options",
    "observers",
    "register",
    "run",
    "server_options",
]


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "picker",
        help="run the Envoy ext_proc endpoint picker (Gateway API Inference Extension)",
        description="Serve envoy.service.ext_proc.v3.ExternalProcessor: pick a model-server "
        "pod per request from live metrics and answer with x-gateway-destination-endpoint.",
    )
    parser.add_argument("--endpoints", help="endpoints YAML; default: Kubernetes discovery")
    parser.add_argument("--config", help="InferenceGatewayConfig YAML (resource or bare spec)")
    parser.add_argument("--rewrites", help="InferenceModelRewrite YAML file or folder")
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to bind (gRPC and metrics); default loopback only: pass 0.0.0.0 or :: "
        "where Envoy reaches the picker over the network (the Kubernetes chart does)",
    )
    parser.add_argument("--grpc-port", type=int, default=DEFAULTS["igw picker", "--grpc-port"])
    parser.add_argument(
        "--metrics-port",
        type=int,
        default=DEFAULTS["igw picker", "--metrics-port"],
        help="GET /metrics and /status (default %(default)s; 0 disables)",
    )
    parser.add_argument(
        "--grpc-health-port",
        type=int,
        help="also serve gRPC health (liveness, readiness) in plain text on this port, for "
        "the kubelet's probes when the ext_proc port serves TLS",
    )
    add_tls_arguments(parser)
    parser.add_argument(
        "--transport",
        choices=["http2", "grpcio"],
        default="http2",
        help="gRPC server: our HTTP/2 one (default, ~4x less CPU per exchange) or grpc.aio",
    )
    parser.add_argument(
        "--fallbacks",
        type=int,
        default=0,
        help="ranked fallback pods appended to the destination, for a data plane that "
        "retries along the list; refused with --original-dst (the default), whose cluster "
        "takes exactly one address",
    )
    parser.add_argument(
        "--original-dst",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="Envoy routes to the picked pod with an ORIGINAL_DST cluster on "
        "x-gateway-destination-endpoint (Envoy AI Gateway, GIE's own Envoy config): one "
        "address per request, so --fallbacks must be 0 (default: on)",
    )
    add_body_limit_argument(parser)
    parser.add_argument(
        "--drain-timeout",
        type=float,
        default=30.0,
        metavar="S",
        help="on SIGTERM, readiness NOT_SERVING at once, then serve until the last ext_proc "
        "stream ends, up to S seconds: a stream lasts its request's whole response, so "
        "set the route's timeout (the chart does); default 30",
    )
    parser.add_argument(
        "--body-mode",
        choices=["full-duplex", "buffered"],
        default="full-duplex",
        help="body mode assumed when Envoy sends no protocol_config",
    )
    parser.add_argument(
        "--client-id-from-auth",
        action="store_true",
        help="x-igw-client-id on every request is set by the authenticating filter in front "
        "(Envoy Gateway's SecurityPolicy extAuth to igw auth: its headersToBackend "
        "override a client's), so rate limits may key on it; without this flag a client's "
        "x-igw-client-id is ignored (the charts pass it with kubernetes.auth)",
    )
    add_cluster_arguments(parser)
    add_store_argument(parser)
    k8s = parser.add_argument_group("Kubernetes (when no --endpoints is given)")
    k8s.add_argument("--namespace", default=os.environ.get("POD_NAMESPACE", "default"))
    k8s.add_argument("--pool", action="append", default=[], help="InferencePool name to serve")
    k8s.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster credentials)")
    k8s.add_argument("--api-server", help="API server URL without credentials (dev, tests)")
    k8s.add_argument("--config-name", default="igw", help="InferenceGatewayConfig to watch")
    k8s.add_argument("--no-watch-api", action="store_true", help="do not watch config resources")
    elect = k8s.add_mutually_exclusive_group()
    elect.add_argument("--leader-elect", action="store_true", help="active-passive via a Lease")
    elect.add_argument(
        "--leader-elect-status",
        action="store_true",
        help="elect the Lease's holder as the one replica that writes the "
        "InferenceGatewayConfig's status; every replica stays ready and routes",
    )
    k8s.add_argument("--lease-name", default="igw-picker")
    k8s.add_argument(
        "--status-interval",
        type=float,
        default=5.0,
        metavar="S",
        help="how often the InferenceGatewayConfig's status is refreshed (written on change)",
    )
    parser.set_defaults(handler=run)


def add_cluster_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags `igw serve` and `igw picker` share about the cluster they route for: its
    name and price (GET /status, the global router's heartbeat) and the CloudWatch EMF
    records. In the cluster the picker is what routes, so it is what writes the records
    the alarms read and what answers the heartbeat."""
    parser.add_argument(
        "--emf-interval",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="write a CloudWatch embedded-metric-format record to stdout every SECONDS "
        "(0, the default, is off)",
    )
    parser.add_argument(
        "--hourly-cost",
        type=float,
        default=0.0,
        metavar="USD",
        help="the cluster's hourly price, for the cost per million tokens in GET /status",
    )
    parser.add_argument(
        "--emf-cluster",
        default=os.environ.get("IGW_CLUSTER_NAME", "igw"),
        help="the records' Cluster dimension and GET /status's cluster: the EKS cluster name "
        "(default $IGW_CLUSTER_NAME, else igw)",
    )


def emf_emitter(args: argparse.Namespace, registry: Any, refresh: Any) -> Any:
    """The EmfEmitter the flags ask for, or None; ConfigError on a negative interval."""
    if not args.hourly_cost >= 0:
        from inference_gateway.errors import ConfigError

        raise ConfigError("--hourly-cost", ["<value>: must be 0 or positive"])
    if args.emf_interval < 0:
        from inference_gateway.errors import ConfigError

        raise ConfigError("--emf-interval", ["<value>: must be 0 (off) or positive"])
    if args.emf_interval == 0:
        return None
    from inference_gateway.telemetry.emf import EmfEmitter

    return EmfEmitter(
        registry, cluster=args.emf_cluster, interval_s=args.emf_interval, refresh=refresh
    )


def add_store_argument(parser: argparse.ArgumentParser) -> None:
    """`--store URL` of `igw serve` and `igw picker`: one shared store for the dispatch
    view (shared_store/dispatch.py) and, in `igw serve`, the rate limits
    (shared_store/ratelimit.py); `shared_store.client.store_from_flag` parses it, the
    password comes from $IGW_STORE_PASSWORD."""
    parser.add_argument(
        "--store",
        default=os.environ.get("IGW_STORE_URL") or None,
        metavar="URL",
        help="redis:// (rediss:// for TLS) store the replicas share: their dispatch view, so N "
        "replicas pick like one, and (igw serve) rate limits exact across replicas; the local "
        "view while it is unreachable (default $IGW_STORE_URL; none: this replica alone)",
    )


def add_body_limit_argument(parser: argparse.ArgumentParser) -> None:
    """`--max-body-bytes`, one limit for both ext_proc servers (the picker and bbr)."""
    parser.add_argument(
        "--max-body-bytes",
        type=int,
        metavar="BYTES",
        help="answer 413 to a request body larger than this (default 4 MiB; the chart "
        "passes kubernetes.max_request_body_bytes)",
    )


def body_limit(args: argparse.Namespace) -> int:
    """The `--max-body-bytes` given, else the ext_proc driver's default; a ConfigError
    (exit 2) below 1 KiB."""
    from inference_gateway.errors import ConfigError
    from inference_gateway.frontends.extproc.stream import MAX_BODY_BYTES

    limit: int = MAX_BODY_BYTES if args.max_body_bytes is None else args.max_body_bytes
    if limit < 1024:
        raise ConfigError("--max-body-bytes", ["<value>: must be 1024 or more"])
    return limit


def add_tls_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tls", action="store_true", help="serve TLS (self-signed by default)")
    parser.add_argument("--tls-cert", help="PEM certificate (with --tls-key)")
    parser.add_argument("--tls-key", help="PEM private key (with --tls-cert)")


def credentials(args: argparse.Namespace) -> Any:
    if not (args.tls or args.tls_cert or args.tls_key):
        return None
    from inference_gateway.transport.tls import server_credentials

    return server_credentials(args.tls_cert, args.tls_key)[0]


def tls_options(args: argparse.Namespace) -> dict[str, Any]:
    """TLS for the chosen transport: gRPC credentials (grpcio) or an SSL context (http2)."""
    if not (args.tls or args.tls_cert or args.tls_key):
        return {}
    context = server_ssl_context(args)  # a bad pair stops the start here, either transport
    if transport(args.transport) == "grpcio":
        return {"credentials": credentials(args)}
    return {"ssl_context": context}


def server_ssl_context(args: argparse.Namespace) -> Any:
    """The `--tls` / `--tls-cert` / `--tls-key` flags as an SSL context for our HTTP/2
    server (the picker's and the body-based router's), or None without them."""
    if not (args.tls or args.tls_cert or args.tls_key):
        return None
    from inference_gateway.errors import ConfigError
    from inference_gateway.transport.http2_server import ssl_context
    from inference_gateway.transport.tls import self_signed

    if (args.tls_cert is None) != (args.tls_key is None):
        raise ConfigError("TLS", ["--tls-cert, --tls-key: give both or neither"])
    if args.tls_cert is None:
        return ssl_context(*self_signed())
    for path in (args.tls_cert, args.tls_key):
        try:
            Path(path).read_bytes()
        except OSError as error:
            raise ConfigError(path, [f"cannot read file: {error.strerror}"]) from None
    cert, key = Path(args.tls_cert).read_bytes(), Path(args.tls_key).read_bytes()
    try:
        return ssl_context(cert, key)
    except ssl.SSLError as error:
        raise ConfigError(
            args.tls_cert,
            [f"not a PEM certificate whose key is --tls-key {args.tls_key} ({error.reason})"],
        ) from None


def run(args: argparse.Namespace) -> int:
    start_server_process()
    return asyncio.run(_serve(args))


def transport(name: str) -> str:
    """The gRPC server to run; `http2` needs `hpack` (an image built from an older
    package manifest may lack it: then grpc.aio, said once in the log)."""
    import importlib.util

    if name == "http2" and importlib.util.find_spec("hpack") is None:
        logging.getLogger(__name__).warning("hpack is not installed: serving with grpc.aio")
        return "grpcio"
    return name


def check_fallbacks(args: argparse.Namespace) -> None:
    """`--fallbacks N` puts N+1 addresses in x-gateway-destination-endpoint; Envoy's
    ORIGINAL_DST cluster reads the header as one `ip:port` (envoy
    source/common/upstream/original_dst_cluster.cc: an unparsable address is no host),
    so every request would end `503 no_healthy_upstream`: refused at startup instead."""
    from inference_gateway.errors import ConfigError

    if args.fallbacks < 0:
        raise ConfigError("--fallbacks", ["<value>: must be 0 or positive"])
    if args.fallbacks and args.original_dst:
        raise ConfigError(
            "--fallbacks",
            [
                f"<value>: {args.fallbacks} fallbacks make the destination a list, which an "
                "ORIGINAL_DST cluster (Envoy AI Gateway's, GIE's) cannot route: every request "
                "would fail 503 no_healthy_upstream. Keep --fallbacks 0, or pass "
                "--no-original-dst for a data plane that retries along the list"
            ],
        )


def server_options(args: argparse.Namespace) -> dict[str, Any]:
    """`PickerServer` keyword arguments from the command line."""
    from envoy.extensions.filters.http.ext_proc.v3.processing_mode_pb2 import ProcessingMode

    check_fallbacks(args)

    from inference_gateway.frontends.extproc.picker import PickerOptions

    mode = (
        ProcessingMode.BUFFERED
        if args.body_mode == "buffered"
        else ProcessingMode.FULL_DUPLEX_STREAMED
    )
    limit = body_limit(args)
    options = PickerOptions(
        fallbacks=args.fallbacks,
        max_body_bytes=limit,
        request_body_mode=mode,
        response_body_mode=mode,
    )
    return {
        "options": options,
        "host": args.host,
        "grpc_port": args.grpc_port,
        "metrics_port": args.metrics_port or None,
        "health_port": args.grpc_health_port,
        # the cluster's heartbeat for igw global, on the metrics port
        "status": {"cluster": args.emf_cluster, "hourly_cost_usd": args.hourly_cost},
        "transport": transport(args.transport),
        **tls_options(args),
    }


def kubernetes_options(args: argparse.Namespace) -> Any:
    """The Kubernetes mode's options from the command line."""
    from inference_gateway.kubernetes.picker import KubernetesOptions

    return KubernetesOptions(
        namespace=args.namespace,
        pools=tuple(args.pool),
        kubeconfig=args.kubeconfig,
        api_server=args.api_server,
        config=args.config,
        rewrites=args.rewrites,
        config_name=args.config_name,
        watch_api=not args.no_watch_api,
        leader_elect=args.leader_elect or args.leader_elect_status,
        leader_gates_readiness=not args.leader_elect_status,
        lease_name=args.lease_name,
        status_interval_s=args.status_interval,
    )


def observers(args: argparse.Namespace, core: Any) -> list[Any]:
    """Collaborators that read the core: EMF records, the shared dispatch view."""
    out = []
    emitter = emf_emitter(
        args, core.metrics.registry, lambda: core.director.refresh_gauges(core.store.pools())
    )
    if emitter is not None:
        out.append(emitter)
    if args.store:
        from inference_gateway.shared_store.dispatch import for_director

        out.append(for_director(args.store, core.director))
    return out


async def _serve(args: argparse.Namespace) -> int:
    from inference_gateway.assembly.config_watch import FileConfigSource
    from inference_gateway.assembly.core import build_core
    from inference_gateway.assembly.picker import PickerServer
    from inference_gateway.core.endpoints.discovery import load_endpoints_file
    from inference_gateway.kubernetes.picker import KubernetesMode

    server = server_options(args)
    from inference_gateway.transport.listen import check_free

    for port in (args.grpc_port, args.metrics_port, args.grpc_health_port):
        check_free(args.host, port or 0)  # a taken port stops it before anything starts
    mode = None
    if args.endpoints:
        core = build_core(load_endpoints_file(args.endpoints))
        source = FileConfigSource(
            core.apply_config, args.config, args.rewrites, metrics=core.metrics
        )
        picker = PickerServer(core, collaborators=[source, *observers(args, core)], **server)
    else:
        mode = await KubernetesMode.connect(kubernetes_options(args))
        picker = mode.server(observers(args, mode.core), **server)
    picker.core.director.trusted_client_id = args.client_id_from_auth
    from inference_gateway.transport.signals import stop_signals

    stopped = stop_signals("igw picker")  # SIGTERM, SIGINT and SIGHUP alike (transport/signals.py)
    await picker.start()
    settle_collector()
    tls = " (TLS)" if server.get("credentials") or server.get("ssl_context") else ""
    metrics = f"metrics on :{picker.metrics_bound}" if picker.metrics_bound else "metrics off"
    print(f"igw picker: ext_proc on {args.host}:{picker.port}{tls}, {metrics}", flush=True)
    await stopped
    await picker.drain(args.drain_timeout)
    await picker.stop(grace_s=1)
    if mode is not None:
        await mode.close()
    return 0
