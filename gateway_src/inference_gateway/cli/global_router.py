"""`igw global --config GLOBAL.yaml --port 8090`: the global router over cluster gateways.

`igw global drain CLUSTER… | --region R  --config GLOBAL.yaml` (and `undrain`, `drained`)
changes the planned drain set the running routers read every poll interval (drains.py).
A drain that would leave no cluster out of the set is refused without `--force` (every
request would get 503); one whose remaining clusters all fail to answer `GET /status`
from where the command runs goes ahead with a warning (they may only be unreachable
from here, which the routers see differently).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from inference_gateway.cli.process import (
    add_drain_argument,
    add_slow_client_arguments,
    start_server_process,
)
from inference_gateway.transport.ports import DEFAULTS

__all__ = ["register"]


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "global",
        help="run the global router over several cluster gateways",
        description="Serve an OpenAI-compatible endpoint that sends each request to the best "
        "cluster gateway (igw serve) by KV headroom, queue, region, errors and cost, fails "
        "over when a cluster's heartbeat goes stale and enforces global rate limits.",
    )
    parser.add_argument(
        "action",
        nargs="?",
        default="serve",
        choices=("serve", "drain", "undrain", "drained"),
        help="serve (default); drain / undrain clusters in every running router (planned, "
        "through the store or drainFile); drained: list the planned drain set",
    )
    parser.add_argument("clusters", nargs="*", help="cluster names (drain, undrain)")
    parser.add_argument(
        "--force",
        action="store_true",
        help="drain: go ahead even when no cluster would be left to route to",
    )
    parser.add_argument(
        "--region", action="append", default=[], help="every cluster of this region (repeatable)"
    )
    parser.add_argument("--config", required=True, help="global router YAML (clusters, store)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=DEFAULTS["igw global", "--port"])
    add_slow_client_arguments(parser)
    add_drain_argument(parser)
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
    import asyncio

    from inference_gateway.config.global_router import load_router_config
    from inference_gateway.frontends.global_router.server import (
        build_global_router,
        runner_settings,
    )

    if not args.emf_interval >= 0:
        print("igw global: --emf-interval must be 0 (off) or positive", file=sys.stderr)
        return 2
    spec = load_router_config(args.config)  # ConfigError → exit 2
    if args.action != "serve":
        return change_drains(spec, args)
    if args.clusters or args.region:
        print("igw global: cluster names and --region go with drain / undrain", file=sys.stderr)
        return 2
    start_server_process()
    app, router = build_global_router(
        spec,
        emf_interval_s=args.emf_interval,
        environment=args.environment,
        body_timeout_s=args.body_timeout,
    )
    clusters = ", ".join(f"{c.name} ({c.region})" for c in spec.clusters)

    def listening(port: int) -> None:
        print(f"igw global: listening on http://{args.host}:{port} over {clusters}", flush=True)

    from inference_gateway.transport.signals import serve_http

    settings = runner_settings(args.header_timeout)
    asyncio.run(
        serve_http(  # SIGTERM, SIGINT and SIGHUP drain alike (transport/signals.py)
            app,
            name="igw global",
            host=args.host,
            port=args.port,
            in_flight=lambda: router.in_flight,
            grace_s=args.drain_grace,
            on_listening=listening,
            access_log=None,
            **settings,
        )
    )
    return 0


def change_drains(spec: Any, args: argparse.Namespace) -> int:
    """drain / undrain / drained: one change to the planned drain set, then the set."""
    import asyncio

    from prometheus_client import CollectorRegistry

    from inference_gateway.frontends.global_router.drains import PlannedDrains
    from inference_gateway.shared_store.client import StoreHealth, StoreUnavailable, connect

    known = {c.name for c in spec.clusters}
    names = set(args.clusters)
    for region in args.region:
        in_region = {c.name for c in spec.clusters if c.region == region}
        if not in_region:
            print(f"igw global: no cluster in region {region!r}", file=sys.stderr)
            return 2
        names |= in_region
    unknown = sorted(names - known)
    if unknown:
        print(f"igw global: unknown cluster(s) {unknown}; known: {sorted(known)}", file=sys.stderr)
        return 2
    if args.action != "drained" and not names:
        print(f"igw global {args.action}: name a cluster or --region", file=sys.stderr)
        return 2
    if spec.store is None and spec.drain_file is None:
        print("igw global: planned drains need a `store` or a `drainFile`", file=sys.stderr)
        return 2

    async def apply() -> tuple[str, frozenset[str]] | None:
        redis = connect(spec.store) if spec.store is not None else None
        # its own metrics registry: the CLI exports nothing
        health = (
            StoreHealth.for_spec("cli", spec.store, CollectorRegistry())
            if spec.store is not None
            else None
        )
        drains = PlannedDrains(spec, redis, health)
        try:
            where = ""
            if args.action == "drain" and not args.force:
                before = await drains.current(strict=spec.drain_file is None)
                if not await may_drain(spec, before | names):
                    return None
            if args.action != "drained":
                where = await drains.change(frozenset(names), drain=args.action == "drain")
            return where, await drains.current(strict=args.action == "drained")
        finally:
            if redis is not None:
                await redis.aclose()

    try:
        outcome = asyncio.run(apply())
        if outcome is None:
            return 2
        where, current = outcome
    except StoreUnavailable as error:
        if args.action == "drained":
            print(
                f"igw global: store unreachable, the drain set is unknown ({error})",
                file=sys.stderr,
            )
        else:
            print(f"igw global: store unreachable, nothing changed ({error})", file=sys.stderr)
        return 1
    if where.startswith("file") and spec.store is not None:
        print(f"igw global: store unreachable; written to the {where} instead", file=sys.stderr)
    if where:
        print(f"igw global: {args.action} {', '.join(sorted(names))} ({where})")
    print(f"planned drain set: {', '.join(sorted(current)) or '(empty)'}")
    return 0


STATUS_PROBE_TIMEOUT_S = 2.0


async def may_drain(spec: Any, after: frozenset[str]) -> bool:
    """Whether a drain that leaves `after` drained may go ahead without --force: False
    (said on stderr) when no cluster would be left; a warning when none of those left
    answers `GET /status` from here (module docstring)."""
    left = sorted(c.name for c in spec.clusters if c.name not in after)
    if not left:
        every = ", ".join(sorted(c.name for c in spec.clusters))
        print(
            f"igw global drain: refused: that drains every cluster ({every}), so every "
            "request would be answered 503; pass --force to drain them all anyway",
            file=sys.stderr,
        )
        return False
    urls = [c.base_url for c in spec.clusters if c.name in left]
    answers = await _answering(urls)
    if not any(answers):
        print(
            f"igw global drain: warning: no cluster left ({', '.join(left)}) answered GET "
            f"/status from here within {STATUS_PROBE_TIMEOUT_S:g} s; if they are down, "
            "every request gets 503 (`igw global undrain` lifts the drain)",
            file=sys.stderr,
        )
    return True


async def _answering(urls: list[str]) -> list[bool]:
    """Whether each cluster gateway answers a valid `GET /status` within the timeout."""
    import asyncio

    import aiohttp
    from pydantic import ValidationError

    from inference_gateway.core.scheduling.cluster_registry import MAX_STATUS_BYTES, ClusterStatus

    timeout = aiohttp.ClientTimeout(total=STATUS_PROBE_TIMEOUT_S)

    async def one(session: aiohttp.ClientSession, url: str) -> bool:
        try:
            async with session.get(url + "/status") as response:
                raw = await response.content.read(MAX_STATUS_BYTES + 1)
                if response.status != 200 or len(raw) > MAX_STATUS_BYTES:
                    return False
            ClusterStatus.model_validate_json(raw)
        except (aiohttp.ClientError, OSError, TimeoutError, ValidationError):
            return False
        return True

    async with aiohttp.ClientSession(timeout=timeout) as session:
        return list(await asyncio.gather(*(one(session, url) for url in urls)))
