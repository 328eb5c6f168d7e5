"""`igw bbr --grpc-port 9004 [--config CONFIG.yaml]`: the body-based router."""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from inference_gateway.cli.picker import (
    add_body_limit_argument,
    add_tls_arguments,
    body_limit,
    server_ssl_context,
)
from inference_gateway.cli.process import add_drain_argument, start_server_process
from inference_gateway.transport.ports import DEFAULTS

__all__ = ["register", "run"]


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "bbr",
        help="run the body-based router (sets X-Gateway-Model-Name from the body)",
        description="An Envoy ext_proc that reads `model` from the JSON body and sets "
        "X-Gateway-Model-Name and X-Gateway-Base-Model-Name (a configured LoRA adapter's "
        "base model, else the model itself) so HTTPRoutes can match the pool that serves it.",
    )
    parser.add_argument("--config", help="InferenceGatewayConfig YAML (adapter → base model)")
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to bind; default loopback only, as `igw picker`: pass 0.0.0.0 or :: "
        "where Envoy reaches the router over the network (the Kubernetes chart does)",
    )
    parser.add_argument("--grpc-port", type=int, default=DEFAULTS["igw bbr", "--grpc-port"])
    add_body_limit_argument(parser)
    add_drain_argument(parser, "exchanges")
    add_tls_arguments(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    start_server_process()
    return asyncio.run(_serve(args))


async def _serve(args: argparse.Namespace) -> int:
    from inference_gateway.core.scheduling.config_checks import load_config
    from inference_gateway.frontends.bbr import start_bbr
    from inference_gateway.transport.signals import log_drained, stop_signals

    stopped = stop_signals("igw bbr")  # SIGTERM, SIGINT and SIGHUP alike (transport/signals.py)
    config = load_config(args.config) if args.config else None
    server, port = await start_bbr(
        config,
        host=args.host,
        port=args.grpc_port,
        ssl_context=server_ssl_context(args),
        max_body_bytes=body_limit(args),
    )
    print(f"igw bbr: ext_proc on {args.host}:{port}", flush=True)
    await stopped
    log_drained("igw bbr", await server.stop(args.drain_grace))
    return 0
