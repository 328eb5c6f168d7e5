"""`igw bbr --grpc-port 9004 [--config CONFIG.yaml]`: the body-based router."""

from __future__ import annotations

import argparse
import asyncio
import signal
from typing import Any

from inference_gateway.cli.picker import add_tls_arguments, server_ssl_context

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
    parser.add_argument("--grpc-port", type=int, default=9004)
    add_tls_arguments(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    try:
        import uvloop

        uvloop.install()
    except ImportError:  # pragma: no cover - uvloop is a pinned dependency
        pass
    return asyncio.run(_serve(args))


async def _serve(args: argparse.Namespace) -> int:
    from inference_gateway.config.spec import load_config
    from inference_gateway.frontends.bbr import start_bbr

    config = load_config(args.config) if args.config else None
    server, port = await start_bbr(
        config, host=args.host, port=args.grpc_port, ssl_context=server_ssl_context(args)
    )
    print(f"igw bbr: ext_proc on {args.host}:{port}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await server.stop(5)
    return 0
