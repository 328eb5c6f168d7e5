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
3. the checks vLLM makes before it serves (`vllm_pod.pod_settings`): the tool-call
   parser's name, the model's context length against the model and the KV cache,
   attention heads against the TP size, LoRA adapters needing `--enable-lora` (raised as
   vLLM raises them), and the mapping of the options onto an emulated pod;
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

import sys
from collections.abc import Sequence
from typing import Any

from inference_gateway.emulator import vllm_startup
from inference_gateway.emulator.vllm_args import parse_serve_args, validate_serve_args
from inference_gateway.errors import ConfigError

__all__ = ["EMULATED_GPU_ENV", "VLLM_EXECUTABLE_DIR", "VLLM_IMAGE_CONFIG", "main"]

#: The GPU profile the emulated pod runs on (the harness's stand-in for the node's GPU).
EMULATED_GPU_ENV = "IGW_EMULATED_GPU"
#: Where the image has its `vllm` command (the harness puts the stand-in there).
VLLM_EXECUTABLE_DIR = "/usr/local/bin"

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


def main(argv: Sequence[str] | None = None) -> int:
    """Run `vllm ARGS` as the emulator; returns the exit status (argparse exits 2 itself,
    and vLLM's own exceptions propagate, so a script prints their traceback and exits 1)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    vllm_startup.import_effects()
    parsed = parse_serve_args(argv)
    if parsed.subcommand != "serve":
        return _refuse(f"`vllm {parsed.subcommand or ''}` is not emulated: only `vllm serve`")
    validate_serve_args(parsed.options)
    # the engine model loads only now: `--help` and flag errors answer without it
    from inference_gateway.emulator import vllm_pod

    try:
        settings = vllm_pod.pod_settings(parsed.options, argv)
    except ConfigError as error:
        return _refuse("; ".join(error.problems))
    vllm_pod.check_listen(settings.host, settings.port)  # setup_server binds first
    for path in vllm_startup.start_effects(settings.plan):
        print(f"INFO vllm-emulator: made {path}", flush=True)
    vllm_pod.serve(settings)
    return 0


def _refuse(problem: str) -> int:
    print(f"vllm serve (emulator): {problem}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
