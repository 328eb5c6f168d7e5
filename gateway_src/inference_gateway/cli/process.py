"""How every `igw` server process starts (serve, picker, bbr, auth, global, pd-sidecar):
one INFO line per event on stderr (a drain, a store fallback, a reload; never a
traceback per client), and uvloop's event loop (a pinned dependency); and the flags
the HTTP servers share, with their defaults (transport/defaults.py) and their check."""

from __future__ import annotations

import argparse
import gc
import logging
from typing import Any

import uvloop

from inference_gateway.transport.defaults import BODY_TIMEOUT_S, DRAIN_GRACE_S, HEADER_TIMEOUT_S

__all__ = [
    "LOG_FORMAT",
    "add_drain_argument",
    "add_slow_client_arguments",
    "add_tracing_argument",
    "positive_seconds",
    "settle_collector",
    "start_server_process",
    "tracing_from_args",
]

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"
YOUNG_THRESHOLD = 10_000  # allocations between young collections (settle_collector)


def settle_collector() -> None:
    """Set the cyclic garbage collector up for serving, once serving starts (`igw serve`,
    `igw picker`); `bench/scale.py` figures, 1,024 pods:

    * **Freeze what exists.** Everything the server built by then (modules, config, the
      pods' first views) leaves the collector's reach, so a full collection scans only
      what came after. Without it `igw picker` paused its loop 57-111 ms at every full
      collection, about one every 0.7 s, a wait that no timing inside the loop shows but
      that every request arriving then sits out. Objects alive now are never collected
      as cycles later: most live as long as the server, and a pod or config replaced
      later leaves only its few startup cycles.
    * **Collect the young generation every `YOUNG_THRESHOLD` allocations** (of tracked
      objects, net of those freed), not CPython's 700. At 700, young collections ran
      about 30 times a second over the objects of scrapes and requests in flight, and a
      pod's view, kept one scrape interval, outlived two of them: it went to the oldest
      generation, whose growth brought a full collection every 4 s (15-18 ms). 700
      against 10,000 (100 pools, 500 req/s): the collector's share of the loop 2.0-2.2 %
      against 0.3-0.4 %, a full collection every 4 s against none in 8 s, longest pause
      15-18 against 7-10 ms, requests' wait p99 4.1-5.3 against 3.1-3.9 ms. Garbage in
      cycles waits longer for its collection, at most that many objects more. The older
      generations keep CPython's thresholds."""
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, old)


def start_server_process() -> None:
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)
    uvloop.install()


def positive_seconds(value: str) -> float:
    """An argparse type: a duration above 0 (exit 2 with the flag's name otherwise)."""
    try:
        seconds = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {value!r}") from None
    if not seconds > 0:  # NaN too
        raise argparse.ArgumentTypeError(f"must be positive, got {value}")
    return seconds


def add_slow_client_arguments(parser: argparse.ArgumentParser) -> None:
    """`--header-timeout` and `--body-timeout` (transport/http_settings.py applies them)."""
    parser.add_argument(
        "--header-timeout",
        type=positive_seconds,
        default=HEADER_TIMEOUT_S,
        metavar="SECONDS",
        help="close a connection whose request head is not complete this long after it "
        "opened or its last response ended (slow clients; also the idle keep-alive limit; "
        "default %(default)s)",
    )
    parser.add_argument(
        "--body-timeout",
        type=positive_seconds,
        default=BODY_TIMEOUT_S,
        metavar="SECONDS",
        help="answer 408 and close the connection when a request body is not complete "
        "this long after its head (slow clients; default %(default)s)",
    )


def add_drain_argument(parser: argparse.ArgumentParser, in_flight: str = "requests") -> None:
    """`--drain-grace` (transport/signals.py drains for it)."""
    parser.add_argument(
        "--drain-grace",
        type=positive_seconds,
        default=DRAIN_GRACE_S,
        metavar="SECONDS",
        help=f"on SIGTERM, SIGINT or SIGHUP: stop listening, let {in_flight} in flight "
        "finish for at most this long, then exit (default %(default)s)",
    )


def add_tracing_argument(parser: argparse.ArgumentParser) -> None:
    """`--trace-sampling RATIO` of the servers without a config file (`igw auth`,
    `igw pd-sidecar`; the others take `tracing` from theirs)."""
    parser.add_argument(
        "--trace-sampling",
        type=float,
        metavar="RATIO",
        help="export OpenTelemetry spans (OTEL_EXPORTER_OTLP_* variables), following the "
        "caller's sampling decision and sampling RATIO (0-1) of requests without one; "
        "default off",
    )


def tracing_from_args(args: argparse.Namespace, service: str) -> Any:
    """The `Tracing` `--trace-sampling` asks for (off without it)."""
    from inference_gateway.config.spec import TracingSpec
    from inference_gateway.telemetry.tracing import Tracing

    ratio = args.trace_sampling
    if ratio is None:
        return Tracing.off()
    if not 0 <= ratio <= 1:
        raise ValueError(f"--trace-sampling must be from 0 to 1, got {ratio:g}")
    return Tracing.build(TracingSpec(enabled=True, sampling_ratio=ratio), service)
