"""`igw emulate`: one emulated vLLM pod, or a whole fleet from a YAML file, in one process.

    igw emulate --gpu H100 --model llama-3.1-8b --port 8001 [--max-loras N --adapters a,b]
        [--kv-events-config '{"enable_kv_cache_events": true, "publisher": "zmq",
                              "endpoint": "tcp://*:5557", "topic": "kv-events"}']
    igw emulate --fleet FLEET.yaml [--write-endpoints ENDPOINTS.yaml]

Bad input (unknown GPU or model, a malformed fleet file) raises `ConfigError` before any
port is opened, so `igw` prints the field paths and exits 2. Runs on uvloop when it is
installed; SIGINT/SIGTERM stop the pods cleanly.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from collections.abc import Coroutine
from typing import Any

import orjson

from inference_gateway.emulator.fleet import EmulatedFleet, FleetSpec, load_fleet, parse_fleet
from inference_gateway.emulator.kv_publisher import parse_kv_events_config
from inference_gateway.errors import ConfigError
from inference_gateway.protocols.vllm.block_hashing import HASH_ALGOS
from inference_gateway.transport.ports import DEFAULTS

__all__ = ["build_spec", "register", "run", "run_loop"]


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "emulate",
        help="run emulated vLLM pods (one, or a fleet from a YAML file)",
        description=(
            "Emulate vLLM model-server pods: OpenAI endpoints with streaming, /v1/models, "
            "/health and vLLM's /metrics, driven by a roofline engine model. "
            "Give --gpu and --model for one pod, or --fleet for many."
        ),
    )
    parser.add_argument("--fleet", metavar="FLEET.yaml", help="fleet file (many pods)")
    parser.add_argument("--gpu", help="GPU profile, e.g. H100, A10G, L4")
    parser.add_argument("--model", help="model profile, e.g. llama-3.1-8b")
    parser.add_argument("--name", default="pod", help="pod name in output and endpoints")
    parser.add_argument("--host", default=None, help="listen address (default 127.0.0.1)")
    parser.add_argument(
        "--port",
        type=int,
        default=DEFAULTS["igw emulate", "--port"],
        help="listen port (default %(default)s)",
    )
    parser.add_argument("--tp", type=int, default=None, help="tensor-parallel GPUs")
    parser.add_argument("--max-loras", type=int, default=None, help="resident LoRA slots")
    parser.add_argument("--adapters", default="", help="comma-separated LoRA adapter names")
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    parser.add_argument("--max-num-seqs", type=int, default=None)
    parser.add_argument("--max-num-batched-tokens", type=int, default=None)
    parser.add_argument("--served-model-name", default=None)
    parser.add_argument(
        "--tokenizer",
        default=None,
        metavar="DIR",
        help="vLLM's flag: a directory with the model's tokenizer files (tokenizer.json, "
        "tokenizer_config.json); the pod counts and hashes their token ids",
    )
    parser.add_argument(
        "--prefix-caching-hash-algo",
        default=None,
        choices=HASH_ALGOS,
        help="vLLM's flag: how prefix-cache blocks are hashed (default sha256)",
    )
    parser.add_argument(
        "--kv-events-config",
        default=None,
        metavar="JSON",
        help="vLLM's KV-events config (publish BlockStored/BlockRemoved over ZMQ); "
        "in a fleet file, the key kv_events_config",
    )
    for flag, text in (
        ("--tool-call-miss-rate", "fraction of tool requests answered without a call"),
        ("--tool-call-error-rate", "fraction of tool calls answered with a wrong value"),
        ("--temperature0-jitter", "fraction of temperature-0 replies that vary per request"),
    ):
        parser.add_argument(flag, type=float, default=None, help=text + " (default 0)")
    parser.add_argument(
        "--stream-interval",
        type=int,
        default=None,
        help="vLLM's flag: tokens per streamed event (default 1)",
    )
    parser.add_argument(
        "--stream-error-after-tokens",
        type=int,
        default=None,
        help="fault injection: every stream ends after this many tokens with vLLM's "
        "mid-stream error event (default off)",
    )
    parser.add_argument(
        "--kv-transfer-config",
        metavar="JSON",
        help="vLLM's flag for disaggregated prefill/decode, e.g. "
        '\'{"kv_connector": "NixlConnector", "kv_role": "kv_both"}\' (emulator/kvtransfer.py)',
    )
    parser.add_argument(
        "--write-endpoints",
        metavar="PATH",
        help="write an endpoints file (upstream file-discovery shape) for `igw serve`",
    )
    parser.set_defaults(handler=run)


def build_spec(args: argparse.Namespace) -> tuple[FleetSpec, str]:
    """The fleet spec the arguments describe, and the name of its source for errors."""
    single = {
        "--gpu": args.gpu,
        "--model": args.model,
        "--tp": args.tp,
        "--max-loras": args.max_loras,
        "--adapters": args.adapters or None,
        "--max-num-seqs": args.max_num_seqs,
        "--max-num-batched-tokens": args.max_num_batched_tokens,
        "--served-model-name": args.served_model_name,
        "--kv-events-config": args.kv_events_config,
        "--tokenizer": args.tokenizer,
        "--prefix-caching-hash-algo": args.prefix_caching_hash_algo,
        "--tool-call-miss-rate": args.tool_call_miss_rate,
        "--tool-call-error-rate": args.tool_call_error_rate,
        "--temperature0-jitter": args.temperature0_jitter,
        "--stream-interval": args.stream_interval,
        "--stream-error-after-tokens": args.stream_error_after_tokens,
        "--kv-transfer-config": args.kv_transfer_config,
    }
    if args.fleet:
        given = [flag for flag, value in single.items() if value is not None]
        if given:
            raise ConfigError("arguments", [f"{', '.join(given)}: not allowed with --fleet"])
        spec = load_fleet(args.fleet)
        if args.host is not None:
            spec = spec.model_copy(update={"host": args.host})
        return spec, args.fleet
    missing = [flag for flag in ("--gpu", "--model") if single[flag] is None]
    if missing:
        raise ConfigError("arguments", [f"{m}: required unless --fleet is given" for m in missing])
    pod: dict[str, Any] = {
        "name": args.name,
        "gpu": args.gpu,
        "model": args.model,
        "tp": args.tp,
        "max_loras": args.max_loras,
        "adapters": [a.strip() for a in args.adapters.split(",") if a.strip()],
        "gpu_memory_utilization": args.gpu_memory_utilization,
        "max_num_seqs": args.max_num_seqs,
        "max_num_batched_tokens": args.max_num_batched_tokens,
        "served_model_name": args.served_model_name,
        "kv_events_config": (
            parse_kv_events_config(args.kv_events_config) if args.kv_events_config else None
        ),
        "tokenizer": args.tokenizer,
        "prefix_caching_hash_algo": args.prefix_caching_hash_algo or "sha256",
        "behavior": {
            key: value
            for key, value in (
                ("tool_call_miss_rate", args.tool_call_miss_rate),
                ("tool_call_error_rate", args.tool_call_error_rate),
                ("temperature0_jitter", args.temperature0_jitter),
                ("stream_interval", args.stream_interval),
                ("stream_error_after_tokens", args.stream_error_after_tokens),
            )
            if value is not None
        },
    }
    if args.kv_transfer_config is not None:
        try:
            pod["kv_transfer_config"] = orjson.loads(args.kv_transfer_config)
        except orjson.JSONDecodeError as error:
            raise ConfigError(
                "arguments", [f"--kv-transfer-config: invalid JSON ({error})"]
            ) from None
    data = {"base_port": args.port, "host": args.host or "127.0.0.1", "pods": [pod]}
    spec = parse_fleet(data, "arguments")
    return spec, "arguments"


def run(args: argparse.Namespace) -> int:
    spec, source = build_spec(args)
    fleet = EmulatedFleet(spec, source=source)  # validates profiles: ConfigError → exit 2
    try:
        run_loop(_serve(fleet, args.write_endpoints))
    except OSError as error:
        print(f"igw emulate: cannot listen: {error}", file=sys.stderr)
        return 1
    return 0


def run_loop(coroutine: Coroutine[Any, Any, None]) -> None:
    """Run a server coroutine to its end, on uvloop (also the `vllm` stand-in's loop)."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a pinned dependency
        asyncio.run(coroutine)
    else:
        uvloop.run(coroutine)


async def _serve(fleet: EmulatedFleet, endpoints_path: str | None) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    async with fleet:
        for line in fleet.describe():
            print(line, flush=True)
        if endpoints_path:
            fleet.write_endpoints(endpoints_path)
            print(f"endpoints written to {endpoints_path}", flush=True)
        print(f"{len(fleet.pods)} pod(s) ready; Ctrl-C to stop", flush=True)
        await stop.wait()
