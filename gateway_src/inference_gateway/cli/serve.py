"""`igw serve --endpoints ENDPOINTS.yaml [--config CONFIG.yaml] --port 8080`."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from inference_gateway.cli.auth import add_auth_arguments, authenticator
from inference_gateway.cli.picker import add_cluster_arguments, add_store_argument
from inference_gateway.cli.process import (
    add_drain_argument,
    add_slow_client_arguments,
    positive_seconds,
    settle_collector,
    start_server_process,
)
from inference_gateway.frontends.pd_exchange import PREFILL_TIMEOUT_S
from inference_gateway.transport.ports import DEFAULTS

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
    parser.add_argument("--port", type=int, default=DEFAULTS["igw serve", "--port"])
    add_slow_client_arguments(parser)
    add_drain_argument(parser)
    parser.add_argument(
        "--prefill-timeout",
        type=positive_seconds,
        default=PREFILL_TIMEOUT_S,
        metavar="SECONDS",
        help="P/D: a prefill leg slower than this is given up and the request served "
        "aggregated on its decode pod (default %(default)s)",
    )
    parser.add_argument(
        "--debug-destination-headers",
        action="store_true",
        help="name the chosen pod to clients (x-gateway-destination-endpoint header, pod "
        "names in 502 messages); off by default, as it exposes pod addresses",
    )
    parser.add_argument(
        "--policy",
        choices=["gateway", "round-robin"],
        default="gateway",
        help="round-robin runs the same proxy as a plain Service would route",
    )
    add_cluster_arguments(parser)
    add_store_argument(parser)
    add_auth_arguments(parser, jwks_help="the issuer's JWKS (JSON file)")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    import asyncio

    from inference_gateway.assembly.serve import RUN_OPTIONS, build_gateway
    from inference_gateway.shared_store.client import store_from_flag
    from inference_gateway.transport.http_settings import server_settings
    from inference_gateway.transport.signals import serve_http

    if args.emf_interval < 0:
        print("igw serve: --emf-interval must be 0 (off) or positive", file=sys.stderr)
        return 2
    if not args.hourly_cost >= 0:
        print("igw serve: --hourly-cost must be 0 or positive", file=sys.stderr)
        return 2
    app, gateway = build_gateway(
        args.endpoints,
        args.config,
        policy=args.policy,
        rewrites=args.rewrites,
        emf_interval_s=args.emf_interval,
        emf_cluster=args.emf_cluster,
        expose_endpoints=args.debug_destination_headers,
        auth=authenticator(args, "igw serve"),
        hourly_cost_usd=args.hourly_cost,
        store_spec=store_from_flag(args.store),  # ConfigError → exit 2
        body_timeout_s=args.body_timeout,
        prefill_timeout_s=args.prefill_timeout,
    )
    start_server_process()
    if args.store:
        from inference_gateway.shared_store.dispatch import for_director

        share = for_director(args.store, gateway.director)
        app.on_startup.append(lambda _: share.start())
        app.on_cleanup.append(lambda _: share.stop())
    app.on_startup.append(_settle_collector)
    auth = ", authentication on" if args.api_keys or args.jwt_issuer else ""

    def listening(port: int) -> None:
        print(
            f"igw serve: listening on http://{args.host}:{port} (policy {args.policy}{auth})",
            flush=True,
        )

    options = {**RUN_OPTIONS, **server_settings(args.header_timeout)}
    asyncio.run(
        serve_http(
            app,
            name="igw serve",
            host=args.host,
            port=args.port,
            in_flight=lambda: gateway.director.active,
            grace_s=args.drain_grace,
            on_listening=listening,
            **options,
        )
    )
    return 0


async def _settle_collector(app: object) -> None:
    settle_collector()  # aiohttp's on_startup wants a coroutine
