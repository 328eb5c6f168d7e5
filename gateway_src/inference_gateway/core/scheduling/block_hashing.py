"""vLLM's prefix-cache block hashes, computed from token ids exactly as the engine does.

vllm-project/vllm `vllm/v1/core/kv_cache_utils.py`:

* `hash_block_tokens(hash_function, parent_block_hash, curr_block_token_ids,
  extra_keys)` = `hash_function((parent_block_hash or NONE_HASH,
  tuple(curr_block_token_ids), extra_keys))`, one hash per *full* block of
  `block_size` tokens, each chained on the one before;
* `hash_function` is `sha256` by default (`--prefix-caching-hash-algo sha256`):
  `hashlib.sha256(pickle.dumps(input, protocol=pickle.HIGHEST_PROTOCOL)).digest()`;
* `NONE_HASH` (`init_none_hash`) = `hash_function(PYTHONHASHSEED)` when that variable is
  set; unset, releases up to v0.11 take 32 random bytes per process and later ones
  derive it from a fixed default for sha256. A router reproduces a pod's hashes only
  when it is told the pod's seed, so run pods with `PYTHONHASHSEED` set and give the
  scorer the same `hash_seed` (llm-d's guide says the same for its `hashSeed`). The
  emulator, unset, uses "0", the scorer's default;
* `extra_keys` carries the LoRA adapter's name for every block of an adapter request
  (`_gen_lora_extra_hash_keys`), so an adapter never shares blocks with its base model;
* KV events publish the low 64 bits of each hash as an int (`maybe_convert_block_hash`).

The emulator hashes its blocks with this module, and the picker hashes prompts with it,
so both sides of the `precise-prefix-cache-scorer` agree by construction.
"""

from __future__ import annotations

import hashlib
import os
import pickle
from collections.abc import Sequence

__all__ = ["block_hashes", "none_hash", "seed_from_env", "to_external"]

MASK64 = (1 << 64) - 1


def _sha256(value: object) -> bytes:
    return hashlib.sha256(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)).digest()


def seed_from_env() -> str | None:
    """The engine's hash seed: `PYTHONHASHSEED`, as vLLM reads it (None: random)."""
    return os.environ.get("PYTHONHASHSEED")


def none_hash(seed: str | None) -> bytes:
    """vLLM's `NONE_HASH`: the parent of every chain's first block."""
    return os.urandom(32) if seed is None else _sha256(seed)


def to_external(block_hash: bytes) -> int:
    """The int a KV event carries for a block hash (its low 64 bits, big-endian)."""
    return int.from_bytes(block_hash, "big") & MASK64


def block_hashes(
    token_ids: Sequence[int],
    root: bytes,
    *,
    block_size: int = 16,
    extra_keys: tuple[object, ...] | None = None,
) -> list[bytes]:
    """The chained hash of every full block of `token_ids`, from `root` (`none_hash`)."""
    out: list[bytes] = []
    parent = root
    for start in range(0, len(token_ids) - block_size + 1, block_size):
        parent = _sha256((parent, tuple(token_ids[start : start + block_size]), extra_keys))
        out.append(parent)
    return out
