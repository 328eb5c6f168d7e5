"""What `vllm serve` does to its user and filesystem before it answers `/health`.

The stand-in (`vllm_cli.py`) repeats these steps, with the same paths taken from the same
environment variables, so a container spec that would break vLLM in the
`vllm/vllm-openai:v0.11.0` image (vLLM v0.11.0, torch 2.8.0, Python 3.12) breaks the
stand-in the same way and at the same moment: a uid with no passwd entry, a read-only
root filesystem without the writable mounts vLLM needs, a missing `HOME`.

**At import** (`import_effects`), before any argument is parsed, so even
`vllm serve --help` fails: the `vllm` command imports torch's inductor, whose cache
directory code calls `getpass.getuser()`:

* torch 2.8.0 `torch/_inductor/compiler_bisector.py` (module level:
  `CompilerBisector.bisection_enabled = get_is_bisection_enabled()`), reached from vLLM's
  module-level `@torch.compile` in `vllm/model_executor/layers/vocab_parallel_embedding.py`,
  calls `cache_dir()` in `torch/_inductor/runtime/cache_dir_utils.py`: with no
  `TORCHINDUCTOR_CACHE_DIR` it calls `default_cache_dir()` =
  `$TMPDIR/torchinductor_<getpass.getuser()>`, stores it in `TORCHINDUCTOR_CACHE_DIR`
  and creates it (`os.makedirs`);
* torch 2.8.0 `torch/_inductor/codecache.py` (module level:
  `_HEADER_DIR = os.path.join(default_cache_dir(), "precompiled_headers")`) calls
  `default_cache_dir()` unconditionally, so `TORCHINDUCTOR_CACHE_DIR` does not avoid
  `getpass.getuser()`; only `LOGNAME`, `USER`, `LNAME` or `USERNAME` do (Python 3.12
  `getpass.getuser` reads them in that order before `pwd.getpwuid(os.getuid())`, which
  raises `KeyError: 'getpwuid(): uid not found: N'` for a uid with no passwd entry).

Checked by running vLLM v0.11.0 (PyPI wheel, torch 2.8.0+cu128) as uid 10001 with no passwd
entry: `import vllm.entrypoints.cli.main` raised that KeyError from
compiler_bisector; with `TORCHINDUCTOR_CACHE_DIR` set it raised it from codecache.py
line 2310; with `USER` set it imported. Reported upstream for later images too:
vllm-project/vllm#44548, llm-d/llm-d-benchmark#1573 (fixed by setting `USER`),
pytorch/pytorch#140765.

**At start** (`start_effects`), after parsing, in vLLM's order:

* the engine core talks to the API server over ZMQ `ipc://` sockets in
  `VLLM_RPC_BASE_PATH` (default `tempfile.gettempdir()`; vllm/utils `get_open_zmq_ipc_path`);
* the model's config and weights, and each `--lora-modules` adapter that is not a local
  path, land in the Hugging Face hub cache (`--download-dir`, else `HF_HUB_CACHE`, else
  `$HF_HOME/hub`, `HF_HOME` defaulting to `$XDG_CACHE_HOME/huggingface` or
  `~/.cache/huggingface`): the stand-in makes the repository's folder there and fetches
  nothing;
* with tensor parallelism the executor's message queue is a shared-memory ring in
  `/dev/shm` (vllm/v1/executor/multiproc_executor.py, `VLLM_MQ_MAX_CHUNK_BYTES_MB` x 10
  chunks);
* unless `--enforce-eager` or compilation level 0, torch.compile's cache goes to
  `$VLLM_CACHE_ROOT/torch_compile_cache/<hash>/rank_0_0/` with `inductor_cache` and
  `triton_cache` inside (vllm/compilation/backends.py, compiler_interface.py);
  `VLLM_CACHE_ROOT` defaults to `$XDG_CACHE_HOME/vllm` or `~/.cache/vllm` (vllm/envs.py).
  With no `HOME` and no passwd entry `~` does not expand, and the path is relative to the
  working directory, as in vLLM.

Each step raises what Python raises there (`KeyError`, `OSError`); nothing is caught.

Not reproduced, because they land under `HOME` after the checks above have proved it (or
`VLLM_CACHE_ROOT`) writable, or fail without stopping vLLM: Triton's own cache
(`~/.triton`, used by kernels outside torch.compile, e.g. with `--enforce-eager`),
FlashInfer's JIT workspace (`~/.cache/flashinfer`), outlines' cache (only when a request
uses that backend), the model-info cache in `$VLLM_CACHE_ROOT/modelinfos` and usage
statistics in `$VLLM_CONFIG_ROOT` (vLLM logs and goes on when those writes fail).
"""

from __future__ import annotations

import hashlib
import os
import re
import socket
import tempfile
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

__all__ = [
    "StartPlan",
    "default_cache_dir",
    "getuser",
    "hf_hub_cache",
    "import_effects",
    "start_effects",
    "vllm_cache_root",
]

#: `getpass.getuser`'s variables, in the order Python 3.12 reads them.
USER_VARIABLES = ("LOGNAME", "USER", "LNAME", "USERNAME")
MQ_CHUNKS = 10  # shm_broadcast.MessageQueue max_chunks default


def getuser() -> str:
    """Python 3.12's `getpass.getuser()`: the first non-empty of `USER_VARIABLES`, else
    the passwd entry of the uid (`KeyError` when it has none). Spelled out rather than
    called so the exception is 3.12's on every Python (3.13 raises `OSError`)."""
    for name in USER_VARIABLES:
        user = os.environ.get(name)
        if user:
            return user
    import pwd

    return pwd.getpwuid(os.getuid())[0]


def default_cache_dir() -> str:
    """torch 2.8.0 `cache_dir_utils.default_cache_dir`: `$TMPDIR/torchinductor_<user>`."""
    user = re.sub(r'[\\/:*?"<>|]', "_", getuser())
    return os.path.join(tempfile.gettempdir(), "torchinductor_" + user)


def import_effects() -> None:
    """What importing vLLM's CLI does through torch's inductor (module docstring)."""
    cache = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    if cache is None:  # compiler_bisector -> cache_dir()
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache = default_cache_dir()
    os.makedirs(cache, exist_ok=True)
    default_cache_dir()  # codecache._HEADER_DIR, whatever TORCHINDUCTOR_CACHE_DIR says


def _xdg_cache(name: str) -> str:
    root = os.environ.get("XDG_CACHE_HOME", os.path.join(os.path.expanduser("~"), ".cache"))
    return os.path.join(root, name)


def vllm_cache_root() -> str:
    """vllm/envs.py `VLLM_CACHE_ROOT`."""
    return os.path.expanduser(os.environ.get("VLLM_CACHE_ROOT", _xdg_cache("vllm")))


def hf_hub_cache(download_dir: str | None = None) -> str:
    """Where huggingface_hub puts a repository: `--download-dir` when vLLM passes it,
    else `HF_HUB_CACHE` (older `HUGGINGFACE_HUB_CACHE`), else `$HF_HOME/hub`."""
    if download_dir:
        return os.path.expanduser(download_dir)
    home = os.path.expanduser(os.environ.get("HF_HOME", _xdg_cache("huggingface")))
    default = os.path.join(home, "hub")
    cache = os.environ.get("HF_HUB_CACHE", os.environ.get("HUGGINGFACE_HUB_CACHE", default))
    return os.path.expanduser(cache)


def _is_hub_repo(path: str) -> bool:
    """A Hugging Face repository id rather than a local path or a URI (vLLM downloads
    only those)."""
    return "://" not in path and not os.path.isabs(path) and not os.path.exists(path)


@dataclass(frozen=True, slots=True)
class StartPlan:
    """What the command line says vLLM will touch at start."""

    model: str
    adapters: Sequence[str] = ()
    download_dir: str | None = None
    tensor_parallel_size: int = 1
    compiles: bool = True
    command_line: Sequence[str] = ()


def start_effects(plan: StartPlan) -> list[str]:
    """Touch what vLLM touches at start (module docstring); returns the paths made.
    Raises the `OSError` vLLM would meet on a read-only or missing path."""
    made: list[str] = []
    _ipc_socket(os.environ.get("VLLM_RPC_BASE_PATH") or tempfile.gettempdir())
    if _is_hub_repo(plan.model):
        made.append(_hub_folder(hf_hub_cache(plan.download_dir), plan.model))
    for adapter in plan.adapters:  # snapshot_download(repo_id=...): no cache_dir given
        if _is_hub_repo(adapter):
            made.append(_hub_folder(hf_hub_cache(), adapter))
    if plan.tensor_parallel_size > 1:
        _shared_memory(plan.tensor_parallel_size)
    if plan.compiles:
        made += _compile_cache(plan.command_line)
    return made


def _ipc_socket(base: str) -> None:
    """Bind (then remove) a Unix socket where ZMQ's `ipc://` endpoint would be."""
    path = os.path.join(base, str(uuid.uuid4()))
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.bind(path)
    os.unlink(path)


def _hub_folder(cache: str, repo_id: str) -> str:
    """huggingface_hub's folder of a model repository, and its lock folder."""
    folder = "models--" + repo_id.replace("/", "--")
    for path in (os.path.join(cache, folder, "snapshots"), os.path.join(cache, ".locks", folder)):
        os.makedirs(path, exist_ok=True)
    return os.path.join(cache, folder)


def _shared_memory(world_size: int) -> None:
    """The executor's broadcast ring: POSIX shared memory, which glibc's `shm_open` keeps
    as a file in /dev/shm (created, sized, removed)."""
    chunk = int(os.environ.get("VLLM_MQ_MAX_CHUNK_BYTES_MB", "16")) * 2**20
    size = (chunk + 1 + world_size) * MQ_CHUNKS
    path = os.path.join("/dev/shm", f"psm_{uuid.uuid4().hex[:8]}")
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
    try:
        os.ftruncate(fd, size)
    finally:
        os.close(fd)
        os.unlink(path)


def _compile_cache(command_line: Iterable[str]) -> list[str]:
    """vLLM's torch.compile cache folders for rank 0 (its hash covers the config and the
    code; here the command line stands in for both)."""
    key = hashlib.md5("\0".join(command_line).encode(), usedforsecurity=False).hexdigest()[:10]
    rank = os.path.join(vllm_cache_root(), "torch_compile_cache", key, "rank_0_0")
    paths = [os.path.join(rank, "backbone"), os.path.join(rank, "inductor_cache")]
    paths.append(os.path.join(rank, "triton_cache"))
    for path in paths:
        os.makedirs(path, exist_ok=True)
    return paths
