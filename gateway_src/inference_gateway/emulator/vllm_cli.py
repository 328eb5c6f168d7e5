"""The `vllm` command of `vllm/vllm-openai:v0.11.0`, played by the emulator.

The pod harness starts a model-server container as the kubelet would, with the rendered
`command: ["vllm", "serve"]` and args, and puts a `vllm` script on its PATH that calls
`main(argv)` (or `python -m inference_gateway.emulator.vllm_cli serve ...`). The stand-in
then does what vLLM v0.11.0 does, in vLLM's order:

1. what importing vLLM does to the process (torch's inductor cache directory, which calls
   `getpass.getuser()`: `vllm_startup.import_effects`); a uid with no passwd entry and
   no `USER`/`LOGNAME` fails here with vLLM's `KeyError`, even for `--help`;
2. parse the command line with vLLM's own option set (`vllm_args`, transcribed in
   `vllm_serve_args.yaml`): an unknown flag or a bad value exits 2 with argparse's
   message; vLLM's `ValueError`/`TypeError` checks raise as in vLLM;
3. the checks vLLM makes before it serves: the tool-call parser's name, the model's
   context length against the model and the KV cache, attention heads against the TP
   size, LoRA adapters needing `--enable-lora` (raised as vLLM raises them);
4. what vLLM writes at start (`vllm_startup.start_effects`: ZMQ sockets in the temp dir,
   the Hugging Face cache, /dev/shm, the torch.compile cache), then serve the emulated
   pod on `--host`/`--port` until SIGTERM.

Two inputs are the harness's, not vLLM's, so vLLM's flag set stays exact:

* `IGW_EMULATED_GPU` (environment): the GPU profile (`H100`, `A10G`, `L4`, ...). A real pod
  gets its GPU from the node it lands on; the harness sets this from the node group the
  pod's affinity names (`igw.dev/gpu`).
* the model: vLLM's model argument (a Hugging Face repository, or a path ending in one:
  `s3://bucket/meta-llama/Llama-3.1-8B-Instruct`) names an emulator model profile through
  that profile's `hf_repos` (profiles/models.yaml); any other model is refused.

Refusals of the emulator's own (no GPU given, an unknown model, an option vLLM accepts but
the emulator cannot honour without answering differently on the wire: `not_emulated` in
the data file) print `vllm serve (emulator): ...` and exit 1, as a failed vLLM start does.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import os
import signal
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from inference_gateway.emulator import vllm_startup
from inference_gateway.emulator.cli import run_loop
from inference_gateway.emulator.kv_publisher import KVEventsConfig, parse_kv_events_config
from inference_gateway.emulator.kvtransfer import KVTransferConfig, parse_kv_transfer_config
from inference_gateway.emulator.profiles import BLOCK_SIZE, PodProfile, model_for_repo, pod_profile
from inference_gateway.emulator.server import EmulatedPod
from inference_gateway.emulator.vllm_args import (
    option_default,
    option_table,
    parse_serve_args,
    serve_data,
    validate_serve_args,
)
from inference_gateway.errors import ConfigError

__all__ = [
    "EMULATED",
    "GPU_ENV",
    "VLLM_IMAGE_CONFIG",
    "PodSettings",
    "main",
    "pod_settings",
]

GPU_ENV = "IGW_EMULATED_GPU"
GIB = 2**30

#: The image's own configuration, for the harness to start the container as a runtime
#: would (the way it reads this project's image from gateway_src/Dockerfile). vLLM
#: v0.11.0 docker/Dockerfile, final stage `vllm-openai`:
#: `FROM vllm-base AS vllm-openai` / `ENTRYPOINT ["python3", "-m",
#: "vllm.entrypoints.openai.api_server"]`; `vllm-base` is `FROM nvidia/cuda:12.8.1-devel-
#: ubuntu22.04` with `WORKDIR /vllm-workspace`, installs vLLM into the system Python 3.12
#: (`uv pip install --system`, so `vllm` is /usr/local/bin/vllm) and sets no USER (root);
#: `vllm-openai-base` adds `ENV VLLM_USAGE_SOURCE production-docker-image`. PATH,
#: NVIDIA_* and LD_LIBRARY_PATH are the nvidia/cuda base image's (NVIDIA container-images
#: `dist/12.8.1/ubuntu2204/base/Dockerfile`; not read at that tag here, the pattern of
#: its published Dockerfiles). The build stage's /opt/venv (VIRTUAL_ENV) does not reach
#: the final image.
VLLM_IMAGE_CONFIG: dict[str, Any] = {
    "Entrypoint": ["python3", "-m", "vllm.entrypoints.openai.api_server"],
    "Cmd": None,
    "Env": {
        "PATH": "/usr/local/nvidia/bin:/usr/local/cuda/bin:/usr/local/sbin:/usr/local/bin:"
        "/usr/sbin:/usr/bin:/sbin:/bin",
        "LD_LIBRARY_PATH": "/usr/local/nvidia/lib:/usr/local/nvidia/lib64",
        "NVIDIA_VISIBLE_DEVICES": "all",
        "NVIDIA_DRIVER_CAPABILITIES": "compute,utility",
        "CUDA_VERSION": "12.8.1",
        "CUDA_HOME": "/usr/local/cuda",
        "DEBIAN_FRONTEND": "noninteractive",
        "UV_HTTP_TIMEOUT": "500",
        "UV_INDEX_STRATEGY": "unsafe-best-match",
        "UV_LINK_MODE": "copy",
        "VLLM_USAGE_SOURCE": "production-docker-image",
    },
    "WorkingDir": "/vllm-workspace",
    "User": "",
    "Source": "vllm-project/vllm v0.11.0 docker/Dockerfile (stages vllm-base, "
    "vllm-openai-base, vllm-openai)",
}

#: The options the stand-in reads (`emulated` in vllm_serve_args.yaml; a test holds the
#: two equal), and those it refuses away from their default (`not_emulated`).
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
    adapters: tuple[str, ...] = ()
    prefix_caching: bool = True
    auto_tool_choice: bool = False
    kv_events: KVEventsConfig | None = None
    kv_transfer: KVTransferConfig | None = None
    plan: vllm_startup.StartPlan = field(default_factory=lambda: vllm_startup.StartPlan(model=""))


def main(argv: Sequence[str] | None = None) -> int:
    """Run `vllm ARGS` as the emulator; returns the exit status (argparse exits 2 itself,
    and vLLM's own exceptions propagate, so a script prints their traceback and exits 1)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    vllm_startup.import_effects()
    parsed = parse_serve_args(argv)
    if parsed.subcommand != "serve":
        return _refuse(f"`vllm {parsed.subcommand or ''}` is not emulated: only `vllm serve`")
    validate_serve_args(parsed.options)
    try:
        settings = pod_settings(parsed.options, argv)
    except ConfigError as error:
        return _refuse("; ".join(error.problems))
    _check_listen(settings.host, settings.port)  # setup_server binds before the engine
    made = vllm_startup.start_effects(settings.plan)
    for path in made:
        print(f"INFO vllm-emulator: made {path}", flush=True)
    run_loop(_serve(settings))
    return 0


def _refuse(problem: str) -> int:
    print(f"vllm serve (emulator): {problem}", file=sys.stderr)
    return 1


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
    if adapters and not options.enable_lora:
        raise RuntimeError("LoRA is not enabled. Use --enable-lora to enable LoRA.")
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
        if reason and value != option_default(entry):
            problems.append(f"{entry['flags'][0]} {value!r}: {reason}")
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
    gpu = os.environ.get(GPU_ENV, "").strip()
    if not gpu:
        raise ConfigError(
            GPU_ENV,
            [
                f"{GPU_ENV} is not set: name the GPU profile of the node this pod runs on "
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
        from inference_gateway.emulator.profiles import model_profiles

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


def _kv_events(config: dict[str, Any] | None) -> KVEventsConfig | None:
    return None if config is None else parse_kv_events_config(config)


def _kv_transfer(config: dict[str, Any] | None) -> KVTransferConfig | None:
    """vLLM's parsed config, narrowed to the fields the emulator's connector models."""
    if config is None:
        return None
    known = KVTransferConfig.model_fields
    given = {k: v for k, v in config.items() if k in known and v is not None}
    return parse_kv_transfer_config(given, "--kv-transfer-config")


def _check_listen(host: str, port: int) -> None:
    """Bind the listen address as vLLM's setup_server does, before the engine starts:
    a port in use fails here, with the OSError vLLM shows."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))


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


if __name__ == "__main__":
    sys.exit(main())
