"""`igw tokenizer fetch MODEL --dest DIR [--revision R] [--token-file F] [--keep-running]`.

The picker's precise prefix scorer needs the served model's own tokenizer files
(`protocols/vllm/hf_tokenizer.py`), and in a cluster the only copy of a Hugging Face
model's files is the hub the model servers download from. This command copies just the
tokenizer's files (`tokenizer.json` and `tokenizer_config.json`, with
`special_tokens_map.json` and `chat_template.jinja` where the repository has them) at
the revision the servers load, with the same token, into `DIR`. It runs as a sidecar
of the picker pod (cdk8s/charts/tokenizers.py), never inside the picker: the picker
starts and serves without the files (its approximate index) and loads them when they
appear (`core/scheduling/tokenizer_files.py`), so a hub outage or a token not synced yet
delays precise scoring and never the gateway.

The files land in `DIR.partial/` and the directory is renamed to `DIR` once complete, so
the picker sees all of them or none. A `DIR` that already holds `tokenizer.json` is kept
(a restarted sidecar downloads nothing). With `--keep-running` (the sidecar) a failed
download is retried with backoff (5 s doubling to 5 min), the token file re-read each
time (a Secret mounted `optional` fills in once External Secrets has synced it), and
after success the command waits for SIGTERM: a pod's containers run for the pod's life.
SIGTERM ends it at once, in a download or not (exit 0).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import threading
from pathlib import Path
from typing import Any

__all__ = ["fetch", "fetch_loop", "register", "run"]

REQUIRED = ("tokenizer.json", "tokenizer_config.json")
OPTIONAL = ("special_tokens_map.json", "chat_template.jinja")
FIRST_RETRY_S, LAST_RETRY_S = 5.0, 300.0


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "tokenizer",
        help="copy a model's tokenizer files for the precise prefix scorer",
        description="Tokenizer files for `precise-prefix-cache-scorer` (`tokenizer: DIR`).",
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    fetch_parser = actions.add_parser(
        "fetch",
        help="download a Hugging Face model's tokenizer files into a directory",
        description=__doc__.split("\n\n")[1] if __doc__ else None,
    )
    fetch_parser.add_argument("model", help="Hugging Face model id, e.g. meta-llama/Llama-3.1-8B")
    fetch_parser.add_argument("--dest", required=True, type=Path, help="directory to create")
    fetch_parser.add_argument("--revision", default=None, help="branch, tag or commit (main)")
    fetch_parser.add_argument(
        "--token-file", type=Path, default=None, help="file holding a Hugging Face token"
    )
    fetch_parser.add_argument(
        "--endpoint", default=None, help="hub URL (default $HF_ENDPOINT or the public hub)"
    )
    fetch_parser.add_argument(
        "--keep-running",
        action="store_true",
        help="retry until it succeeds, then wait for SIGTERM (a pod's sidecar)",
    )
    fetch_parser.set_defaults(handler=run)


def _token(path: Path | None) -> str | None:
    if path is None or not path.is_file():
        return None
    return path.read_text().strip() or None


def fetch(
    model: str,
    dest: Path,
    *,
    revision: str | None = None,
    token: str | None = None,
    endpoint: str | None = None,
) -> bool:
    """Download the files into `dest` (False: it was already there)."""
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import EntryNotFoundError

    if (dest / "tokenizer.json").is_file():
        return False
    partial = dest.with_name(dest.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    for name in REQUIRED + OPTIONAL:
        try:
            hf_hub_download(
                model, name, revision=revision, token=token, local_dir=partial, endpoint=endpoint
            )
        except EntryNotFoundError:
            if name in REQUIRED:
                raise
    shutil.rmtree(partial / ".cache", ignore_errors=True)  # the hub client's bookkeeping
    os.replace(partial, dest)
    return True


def run(args: argparse.Namespace) -> int:
    stop = threading.Event()
    if args.keep_running:
        signal.signal(signal.SIGTERM, lambda *_: _stop_now(stop))
    return fetch_loop(args, stop)


def _stop_now(stop: threading.Event) -> None:
    """SIGTERM ends the sidecar at once, a download included: the hub client retries a
    hub it cannot reach for tens of seconds, and a pod is not killed cleanly until its
    every container has exited. An unfinished download stays in `DIR.partial/`, which the
    next start clears; `DIR` is whole or absent either way."""
    stop.set()
    raise SystemExit(0)


def fetch_loop(args: argparse.Namespace, stop: threading.Event) -> int:
    """`run`'s work until `stop` is set (see the module docstring)."""
    delay = FIRST_RETRY_S
    where = f"{args.model}@{args.revision or 'main'}"
    while not stop.is_set():
        try:
            done = fetch(
                args.model,
                args.dest,
                revision=args.revision,
                token=_token(args.token_file),
                endpoint=args.endpoint,
            )
        except Exception as error:  # the hub's, the network's, the disk's: say it, retry
            print(f"igw tokenizer fetch: {where}: {error}", file=sys.stderr, flush=True)
            if not args.keep_running:
                return 1
            stop.wait(delay)
            delay = min(delay * 2, LAST_RETRY_S)
            continue
        state = "fetched into" if done else "already in"
        print(f"igw tokenizer fetch: {where}: {state} {args.dest}", flush=True)
        if not args.keep_running:
            return 0
        stop.wait()
    return 0
