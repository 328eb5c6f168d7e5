"""A parsed `vllm serve` command line as an emulated pod, with vLLM's start checks.

`pod_settings` maps the options the emulator models (`emulated` in
vllm_serve_args.yaml, `EMULATED` here) onto an `EmulatedPod`, refuses those it cannot
honour (`not_emulated`), and makes the checks vLLM v0.11.0 makes before it serves, raising
what vLLM raises: the tool-call parser's name (api_server.py validate_api_server_args),
`--max-model-len` against the model and the KV cache (vllm/config/model.py,
vllm/v1/core/kv_cache_utils.py), attention heads against the TP size, LoRA adapters
needing `--enable-lora`. The GPU profile comes from `IGW_EMULATED_GPU` (vllm_cli.py says
why) and the model profile from the repository name (profiles' `hf_repos`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import os
import signal
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from inference_gateway.emulator import vllm_startup
from inference_gateway.emulator.cli import run_loop
from inference_gateway.emulator.kv_publisher import KVEventsConfig, parse_kv_events_config
from inference_gateway.emulator.kvtransfer import KVTransferConfig, parse_kv_transfer_config
from inference_gateway.emulator.profiles import (
    BLOCK_SIZE,
    PodProfile,
    model_for_repo,
    model_profiles,
    pod_profile,
)
from inference_gateway.emulator.server import EmulatedPod
from inference_gateway.emulator.vllm_args import option_default, option_table, serve_data
from inference_gateway.emulator.vllm_cli import EMULATED_GPU_ENV
from inference_gateway.errors import ConfigError

__all__ = ["EMULATED", "PodSettings", "check_listen", "pod_settings", "serve"]

GIB = 2**30

#: The options the stand-in reads (`emulated` in vllm_serve_args.yaml; a test holds the
#: two equal).
EMULATED = frozenset(
    {
        "model_tag",
        "model",
        "host",
        "port",
        "served_model_name",
        "lora_modules",
        "enable_auto_tool_choice",
        "tool_call_parser",
        "tool_parser_plugin",
        "enable_log_outputs",
        "enable_log_requests",
        "max_model_len",
        "enforce_eager",
        "compilation_config",
        "download_dir",
        "tensor_parallel_size",
        "block_size",
        "gpu_memory_utilization",
        "enable_prefix_caching",
        "enable_lora",
        "max_loras",
        "max_num_batched_tokens",
        "max_num_seqs",
        "kv_transfer_config",
        "kv_events_config",
        "prefix_caching_hash_algo",
        "tokenizer",
    }
)


@dataclass(frozen=True)
class PodSettings:
    """The emulated pod a `vllm serve` command line describes."""

    profile: PodProfile
    served_model_name: str
    host: str
    port: int
    max_model_len: int
    plan: vllm_startup.StartPlan
    adapters: tuple[str, ...] = ()
    prefix_caching: bool = True
    auto_tool_choice: bool = False
    kv_events: KVEventsConfig | None = None
    kv_transfer: KVTransferConfig | None = None
    hash_algo: str = "sha256"
    tokenizer: str | None = None


def pod_settings(options: argparse.Namespace, argv: Sequence[str] = ()) -> PodSettings:
    """Map parsed `vllm serve` options onto an emulated pod, with vLLM's start checks.

    Raises `ConfigError` for what the emulator cannot model, and vLLM's exceptions
    (`KeyError`, `ValueError`) for what vLLM itself refuses at start."""
    _refuse_not_emulated(options)
    _check_tool_parser(options)
    model_arg = options.model_tag or options.model
    names = options.served_model_name or [model_arg]
    if len(names) > 1:
        raise ConfigError("--served-model-name", [f"serves one name, not {names}"])
    if options.block_size not in (None, BLOCK_SIZE):
        raise ConfigError(
            "--block-size", [f"{options.block_size}: the emulator models {BLOCK_SIZE} only"]
        )
    adapters = [m.name for m in options.lora_modules or []]
    if adapters and not options.enable_lora:  # the worker's error, as init_static_loras
        raise ValueError("LoRA is not enabled. Use --enable-lora to enable LoRA.")
    for index, name in enumerate(adapters):
        if name in adapters[:index]:
            raise ValueError(f"The lora adapter '{name}' has already been loaded.")
    profile = pod_profile(
        _gpu(),
        _model_profile(model_arg),
        tp=options.tensor_parallel_size,
        gpu_memory_utilization=options.gpu_memory_utilization,
        max_num_seqs=options.max_num_seqs,
        max_num_batched_tokens=options.max_num_batched_tokens,
        max_loras=options.max_loras if options.enable_lora else 0,
    )
    _check_heads(profile)
    compiles = not options.enforce_eager and (options.compilation_config or {}).get("level") != 0
    return PodSettings(
        profile=profile,
        served_model_name=names[0],
        host=options.host or "0.0.0.0",  # vLLM binds ("", port): every IPv4 address
        port=options.port,
        max_model_len=_max_model_len(options.max_model_len, profile),
        adapters=tuple(adapters),
        prefix_caching=options.enable_prefix_caching is not False,  # V1: on unless --no-
        auto_tool_choice=options.enable_auto_tool_choice,
        kv_events=_kv_events(options.kv_events_config),
        kv_transfer=_kv_transfer(options.kv_transfer_config),
        hash_algo=options.prefix_caching_hash_algo,
        tokenizer=_tokenizer(options.tokenizer),
        plan=vllm_startup.StartPlan(
            model=model_arg,
            adapters=tuple(m.path for m in options.lora_modules or []),
            download_dir=options.download_dir,
            tensor_parallel_size=options.tensor_parallel_size,
            compiles=compiles,
            command_line=tuple(argv),
        ),
    )


def _refuse_not_emulated(options: argparse.Namespace) -> None:
    problems = []
    for entry in option_table():
        reason = entry.get("not_emulated")
        value = getattr(options, entry["dest"])
        if reason and value != option_default(entry):  # the value unsaid: it may be a key
            problems.append(f"{entry['flags'][0]}: {reason}")
    if problems:
        raise ConfigError("vllm serve", problems)


def _check_tool_parser(options: argparse.Namespace) -> None:
    """api_server.py validate_api_server_args: a plugin (a path longer than 3 characters)
    may register more names, so only the built-in list is checked without one."""
    parsers = serve_data()["tool_parsers"]
    plugin = options.tool_parser_plugin and len(options.tool_parser_plugin) > 3
    if options.enable_auto_tool_choice and not plugin and options.tool_call_parser not in parsers:
        raise KeyError(
            f"invalid tool call parser: {options.tool_call_parser} "
            f"(chose from {{ {','.join(parsers)} }})"
        )


def _gpu() -> str:
    gpu = os.environ.get(EMULATED_GPU_ENV, "").strip()
    if not gpu:
        raise ConfigError(
            EMULATED_GPU_ENV,
            [
                f"{EMULATED_GPU_ENV} is not set: name the GPU profile of the node this pod runs on "
                "(H100, A10G, L4, ...); a real pod gets its GPU from its node, the pod "
                "harness from the node group its affinity names"
            ],
        )
    return gpu


def _model_profile(model: str) -> str:
    """The profile of vLLM's model argument: a repository id, or a path or URI ending in
    one (`s3://bucket/org/name`, `/models/org/name`)."""
    tail = "/".join(model.rstrip("/").split("/")[-2:])
    name = model_for_repo(model) or model_for_repo(tail)
    if name is None:
        known = sorted(r for m in model_profiles().values() for r in m.hf_repos)
        raise ConfigError("model", [f"{model!r} has no emulator model profile (known: {known})"])
    return name


def _check_heads(profile: PodProfile) -> None:
    """vllm/config/model.py verify_with_parallel_config."""
    heads, tp = profile.model.q_heads, profile.tp
    if heads % tp:
        raise ValueError(
            f"Total number of attention heads ({heads}) must be divisible by tensor "
            f"parallel size ({tp})."
        )


def _max_model_len(given: int | None, profile: PodProfile) -> int:
    """vLLM's two start checks: the model's own limit (vllm/config/model.py
    _get_and_verify_max_len) and one full-length sequence in the KV cache
    (vllm/v1/core/kv_cache_utils.py check_enough_kv_cache_memory)."""
    derived = profile.model.max_model_len
    allow_long = os.environ.get("VLLM_ALLOW_LONG_MAX_MODEL_LEN", "0").strip().lower()
    if given is not None and given > derived and allow_long not in ("1", "true"):
        raise ValueError(
            f"User-specified max_model_len ({given}) is greater than the derived "
            f"max_model_len (max_position_embeddings={derived} or model_max_length=None "
            "in model's config.json). To allow overriding this maximum, set the env var "
            "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1."
        )
    length = given or derived
    block_bytes = BLOCK_SIZE * profile.model.kv_bytes_per_token_per_gpu(profile.tp)
    if length > profile.kv_capacity_tokens:
        needed = math.ceil(length / BLOCK_SIZE) * block_bytes / GIB
        available = profile.num_gpu_blocks * block_bytes / GIB
        raise ValueError(
            f"To serve at least one request with the models's max seq len ({length}), "
            f"({needed:.2f} GiB KV cache is needed, which is larger than the available KV "
            f"cache memory ({available:.2f} GiB). Based on the available memory, the "
            f"estimated maximum model length is {profile.kv_capacity_tokens}. Try "
            "increasing `gpu_memory_utilization` or decreasing `max_model_len` when "
            "initializing the engine."
        )
    return length


def _tokenizer(given: str | None) -> str | None:
    """vLLM's `--tokenizer` as the emulated pod can use it: a local directory with the
    model's tokenizer files (a hub name cannot be read here: the emulator's rule)."""
    return given if given and (Path(given) / "tokenizer.json").is_file() else None


def _kv_events(config: dict[str, Any] | None) -> KVEventsConfig | None:
    return None if config is None else parse_kv_events_config(config)


def _kv_transfer(config: dict[str, Any] | None) -> KVTransferConfig | None:
    """vLLM's parsed config, narrowed to the fields the emulator's connector models."""
    if config is None:
        return None
    known = KVTransferConfig.model_fields
    given = {k: v for k, v in config.items() if k in known and v is not None}
    return parse_kv_transfer_config(given, "--kv-transfer-config")


def check_listen(host: str, port: int) -> None:
    """Bind the listen address as vLLM's setup_server does, before the engine starts:
    a port in use fails here, with the OSError vLLM shows."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))


def serve(settings: PodSettings) -> None:
    """Serve the pod until SIGTERM or SIGINT."""
    run_loop(_serve(settings))


async def _serve(settings: PodSettings) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    pod = EmulatedPod(
        "vllm",
        settings.profile,
        served_model_name=settings.served_model_name,
        adapters=settings.adapters,
        host=settings.host,
        port=settings.port,
        kv_events=settings.kv_events,
        kv_transfer=settings.kv_transfer,
        max_model_len=settings.max_model_len,
        prefix_caching=settings.prefix_caching,
        auto_tool_choice=settings.auto_tool_choice,
        hash_algo=settings.hash_algo,
        tokenizer=settings.tokenizer,
    )
    await pod.start()
    try:
        p = settings.profile
        print(
            f"INFO vllm-emulator: {p.name}, {p.num_gpu_blocks} KV blocks, max_model_len "
            f"{settings.max_model_len}; serving {settings.served_model_name!r} on {pod.url}",
            flush=True,
        )
        print("INFO:     Application startup complete.", flush=True)
        await stop.wait()
    finally:
        await pod.stop()
