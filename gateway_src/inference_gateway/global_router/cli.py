"""`igw global --config GLOBAL.yaml --port 8000`: the global router over cluster gateways."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

__all__ = ["register"]


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "global",
        help="run the global router over several cluster gateways",
        description="Serve an OpenAI-compatible endpoint that sends each request to the best "
        "cluster gateway (igw serve) by KV headroom, queue, region, errors and cost, fails "
        "over when a cluster's heartbeat goes stale and enforces global rate limits.",
    )
    parser.add_argument("--config", required=True, help="global router YAML (clusters, store)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument(
        "--emf-interval",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="write a CloudWatch EMF fleet record to stdout every SECONDS (0: off)",
    )
    parser.add_argument(
        "--environment",
        default=os.environ.get("IGW_ENVIRONMENT", "igw"),
        help="the fleet records' Environment dimension (default $IGW_ENVIRONMENT, else igw)",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    import logging

    from aiohttp import web

    from .config import load_router_config
    from .server import build_global_router

    if not args.emf_interval >= 0:
        print("igw global: --emf-interval must be 0 (off) or positive", file=sys.stderr)
        return 2
    spec = load_router_config(args.config)  # ConfigError → exit 2
    # drains, returns and store fallbacks are one line each
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    app, _ = build_global_router(
        spec, emf_interval_s=args.emf_interval, environment=args.environment
    )
    try:
        import uvloop

        uvloop.install()
    except ImportError:  # pragma: no cover - uvloop is a pinned dependency
        pass
    clusters = ", ".join(f"{c.name} ({c.region})" for c in spec.clusters)
    print(f"igw global: listening on http://{args.host}:{args.port} over {clusters}", flush=True)
    web.run_app(app, host=args.host, port=args.port, print=None, access_log=None)
    return 0
