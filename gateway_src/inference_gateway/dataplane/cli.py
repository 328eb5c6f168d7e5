"""`igw serve --endpoints ENDPOINTS.yaml [--config CONFIG.yaml] --port 8080`."""

from __future__ import annotations

import argparse
import gc
import os
import sys
from typing import Any

__all__ = ["register"]


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "serve",
        help="run the standalone OpenAI-compatible gateway",
        description="Serve /v1/chat/completions, /v1/completions and /v1/models in front of "
        "the pods of an endpoints file, picking a pod per request from live metrics.",
    )
    parser.add_argument("--endpoints", required=True, help="endpoints YAML (upstream shape)")
    parser.add_argument(
        "--config",
        help="InferenceGatewayConfig YAML (default: latency profile, every model the pods list)",
    )
    parser.add_argument(
        "--rewrites",
        help="InferenceModelRewrite YAML file or folder (canary splits); reloaded on change",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument(
        "--header-timeout",
        type=float,
        default=15.0,
        metavar="SECONDS",
        help="close a connection whose request head is not complete this long after it "
        "opened or its last response ended (slow clients; also the idle keep-alive limit; "
        "default %(default)s)",
    )
    parser.add_argument(
        "--policy",
        choices=["gateway", "round-robin"],
        default="gateway",
        help="round-robin runs the same proxy as a plain Service would route",
    )
    parser.add_argument(
        "--emf-interval",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="write a CloudWatch embedded-metric-format record to stdout every SECONDS "
        "(0, the default, is off)",
    )
    parser.add_argument(
        "--emf-cluster",
        default=os.environ.get("IGW_CLUSTER_NAME", "igw"),
        help="the records' Cluster dimension: the EKS cluster name "
        "(default $IGW_CLUSTER_NAME, else igw)",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from aiohttp import web

    from .http_settings import server_settings
    from .server import build_gateway

    if args.header_timeout <= 0:
        print("igw serve: --header-timeout must be positive", file=sys.stderr)
        return 2
    if args.emf_interval < 0:
        print("igw serve: --emf-interval must be 0 (off) or positive", file=sys.stderr)
        return 2
    app, _ = build_gateway(
        args.endpoints,
        args.config,
        policy=args.policy,
        rewrites=args.rewrites,
        emf_interval_s=args.emf_interval,
        emf_cluster=args.emf_cluster,
    )
    try:
        import uvloop

        uvloop.install()
    except ImportError:  # pragma: no cover - uvloop is a pinned dependency
        pass
    app.on_startup.append(_freeze_startup_objects)
    print(
        f"igw serve: listening on http://{args.host}:{args.port} (policy {args.policy})", flush=True
    )
    # no access log (the request metrics count every request); it costs per request
    settings = server_settings(args.header_timeout)
    web.run_app(app, host=args.host, port=args.port, print=None, access_log=None, **settings)
    return 0


async def _freeze_startup_objects(app: object) -> None:
    """Move everything built at startup (modules, config, the app) out of the cyclic
    garbage collector's reach: its collections then scan only per-request objects,
    instead of pausing requests for milliseconds to re-scan the whole heap."""
    gc.collect()
    gc.freeze()
