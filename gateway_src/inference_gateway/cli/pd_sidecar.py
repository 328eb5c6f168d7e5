"""`igw pd-sidecar --listen 0.0.0.0:8000 --decoder http://127.0.0.1:8200
--allow-prefill CIDR [--allow-prefill CIDR ...] [--nixl-side-channel-ports 5600[-5607]]`:
the decode pod's P/D routing sidecar (frontends/pd_sidecar.py; llm-d's routing-sidecar
convention)."""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from inference_gateway.cli.process import (
    add_drain_argument,
    add_tracing_argument,
    positive_seconds,
    start_server_process,
    tracing_from_args,
)
from inference_gateway.core.request.pd_body import NIXL_SIDE_CHANNEL_PORT
from inference_gateway.frontends.pd_exchange import PREFILL_TIMEOUT_S
from inference_gateway.transport.ports import DEFAULTS

__all__ = ["parse_listen", "parse_ports", "register", "run"]

MAX_SIDE_CHANNEL_PORTS = 256


def parse_listen(value: str) -> tuple[str, int]:
    """HOST:PORT (`[::]:8000` for IPv6); ValueError otherwise."""
    host, sep, port = value.rpartition(":")
    if not sep or not port.isascii() or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ValueError(f"--listen must be HOST:PORT, got {value!r}")
    return host.strip("[]") or "0.0.0.0", int(port)


def parse_ports(value: str) -> range:
    """PORT or LOW-HIGH (at most 256 ports); ValueError otherwise."""
    low, _, high = value.partition("-")
    try:
        first, last = int(low), int(high or low)
    except ValueError:
        message = f"--nixl-side-channel-ports must be PORT or LOW-HIGH, got {value!r}"
        raise ValueError(message) from None
    if not 0 < first <= last < 65536 or last - first >= MAX_SIDE_CHANNEL_PORTS:
        raise ValueError(
            f"--nixl-side-channel-ports: {value!r} is not 1-65535 or spans over "
            f"{MAX_SIDE_CHANNEL_PORTS} ports"
        )
    return range(first, last + 1)


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "pd-sidecar",
        help="run the decode pod's P/D sidecar (prefill leg on x-prefiller-host-port)",
        description="In front of a decode pod's vLLM: a request whose header "
        "x-prefiller-host-port names a prefill pod inside --allow-prefill is prefilled "
        "there, then decoded by the local decoder; everything else goes straight to it.",
    )
    parser.add_argument(
        "--listen",
        default=f"127.0.0.1:{DEFAULTS['igw pd-sidecar', '--listen']}",
        help="HOST:PORT to serve on (default %(default)s; the charts pass 0.0.0.0:8000, "
        "the InferencePool's target port)",
    )
    parser.add_argument(
        "--decoder", default="http://127.0.0.1:8200", help="the local vLLM (default %(default)s)"
    )
    parser.add_argument(
        "--allow-prefill",
        action="append",
        required=True,
        metavar="CIDR",
        help="a network prefill pods may be in (repeatable): a header naming an address "
        "outside every one is refused 403 and never dialled (SSRF)",
    )
    parser.add_argument(
        "--prefill-timeout",
        type=positive_seconds,
        default=PREFILL_TIMEOUT_S,
        metavar="SECONDS",
        help="a prefill leg slower than this is given up and served aggregated "
        "(default %(default)s)",
    )
    parser.add_argument(
        "--nixl-side-channel-ports",
        default=str(NIXL_SIDE_CHANNEL_PORT),
        metavar="PORT[-PORT]",
        help="where prefill pods' NIXL handshake listens (vLLM's VLLM_NIXL_SIDE_CHANNEL_PORT, "
        "plus the data-parallel rank: a range for DP > 1); a prefill answer naming another "
        "port, or another host than the pod dialled, is served aggregated (default "
        "%(default)s)",
    )
    add_drain_argument(parser)
    add_tracing_argument(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:

    from inference_gateway.frontends.pd_sidecar import PrefillAllowlist, Sidecar
    from inference_gateway.transport.http_settings import server_settings
    from inference_gateway.transport.signals import serve_http

    try:
        host, port = parse_listen(args.listen)
        allowlist = PrefillAllowlist.parse(args.allow_prefill)
        sidecar = Sidecar(
            args.decoder,
            allowlist,
            prefill_timeout_s=args.prefill_timeout,
            tracing=tracing_from_args(args, "igw-pd-sidecar"),
            side_channel_ports=parse_ports(args.nixl_side_channel_ports),
        )
    except ValueError as error:
        print(f"igw pd-sidecar: {error}", file=sys.stderr)
        return 2
    start_server_process()

    def listening(bound: int) -> None:
        print(f"igw pd-sidecar: listening on http://{host}:{bound}", flush=True)

    asyncio.run(
        serve_http(
            sidecar.app(),
            name="igw pd-sidecar",
            host=host,
            port=port,
            in_flight=lambda: sidecar.active,
            grace_s=args.drain_grace,
            on_listening=listening,
            handler_cancellation=True,  # a client that leaves ends both legs
            access_log=None,
            **server_settings(),
        )
    )
    return 0
