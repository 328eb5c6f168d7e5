"""vLLM's prefix-cache block hashes, computed from token ids exactly as the engine does.

Transcribed from vllm-project/vllm v0.11.0 (the tree's `vllm/vllm-openai:v0.11.0`):

* `vllm/v1/core/kv_cache_utils.py` `hash_block_tokens(hash_function, parent_block_hash,
  curr_block_token_ids, extra_keys)` = `hash_function((parent_block_hash or NONE_HASH,
  tuple(curr_block_token_ids), extra_keys))`, one hash per *full* block of `block_size`
  tokens, each chained on the one before (`get_request_block_hasher`);
* `--prefix-caching-hash-algo` (`vllm/config/cache.py` `PrefixCachingHashAlgo`):
  `sha256` (the default) = `hashlib.sha256(pickle.dumps(input,
  protocol=pickle.HIGHEST_PROTOCOL))`, and `sha256_cbor` = `hashlib.sha256(
  cbor2.dumps(input, canonical=True))` (`vllm/utils/__init__.py`); no other choice exists
  in v0.11.0 (`builtin` went in v0.10, `xxhash` came later);
* `NONE_HASH` (`init_none_hash`) = `hash_function(PYTHONHASHSEED)` (the variable's string)
  when it is set, else 32 random bytes per engine process: a router reproduces a pod's
  hashes only when the pods run with `PYTHONHASHSEED` set and the router is told it
  (llm-d's guide says the same for its `hashSeed`);
* extra keys (`generate_block_hash_extra_keys`): `lora_extra_keys + mm_extra_keys +
  cache_salt_keys`, where the LoRA key is the adapter's `lora_int_id` (in v0.11.0 the
  *int id*, not its name: the server numbers `--lora-modules` 1, 2, … in flag order,
  `OpenAIServingModels.load_lora_adapter`), in every block of an adapter request, and
  the request's `cache_salt` in the first block only; `None` when there is none.
  Multimodal keys (a hash of each image) are not reproduced here: callers give up on
  requests with media parts;
* KV events publish the low 64 bits of each hash as an int (`maybe_convert_block_hash`,
  `VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES`, on by default).

`sha256_cbor` needs only CBOR's deterministic encoding of the five kinds of values a
block key holds (bytes, str, int, None, tuples), written out below from RFC 8949 §3 and
§4.2.1 rather than adding a dependency: what `cbor2.dumps(canonical=True)` writes for them.

The emulator hashes its blocks with this module and the picker hashes prompts with it,
so both sides of the `precise-prefix-cache-scorer` agree by construction; the tests
check this module against vLLM's functions transcribed on their own.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import struct
from collections.abc import Callable, Sequence
from typing import Literal, get_args

__all__ = [
    "HASH_ALGOS",
    "HashAlgo",
    "block_hashes",
    "cbor_encode",
    "hash_function",
    "none_hash",
    "seed_from_env",
    "to_external",
]

MASK64 = (1 << 64) - 1
HashAlgo = Literal["sha256", "sha256_cbor"]
HASH_ALGOS: tuple[str, ...] = get_args(HashAlgo)
HashFunction = Callable[[object], bytes]


def _sha256(value: object) -> bytes:
    return hashlib.sha256(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)).digest()


def _head(major: int, n: int) -> bytes:
    """A CBOR item head: the major type and its argument in the fewest bytes (§4.2.1)."""
    if n < 24:
        return bytes((major << 5 | n,))
    if n < 0x100:
        return bytes((major << 5 | 24, n))
    if n < 0x10000:
        return struct.pack(">BH", major << 5 | 25, n)
    if n < 0x100000000:
        return struct.pack(">BI", major << 5 | 26, n)
    if n <= MASK64:
        return struct.pack(">BQ", major << 5 | 27, n)
    raise ValueError("integer out of CBOR's 64-bit range")


def _cbor(value: object, out: list[bytes]) -> None:
    if value is None:
        out.append(b"\xf6")  # simple value 22
    elif isinstance(value, bool):
        out.append(b"\xf5" if value else b"\xf4")
    elif isinstance(value, int):
        out.append(_head(0, value) if value >= 0 else _head(1, -1 - value))
    elif isinstance(value, bytes):
        out += (_head(2, len(value)), value)
    elif isinstance(value, str):
        data = value.encode()
        out += (_head(3, len(data)), data)
    elif isinstance(value, (tuple, list)):
        out.append(_head(4, len(value)))
        for item in value:
            _cbor(item, out)
    else:
        raise TypeError(f"no CBOR encoding here for {type(value).__name__}")


def cbor_encode(value: object) -> bytes:
    """Deterministic CBOR of None, bools, ints, bytes, str and tuples/lists of them."""
    out: list[bytes] = []
    _cbor(value, out)
    return b"".join(out)


def _sha256_cbor(value: object) -> bytes:
    return hashlib.sha256(cbor_encode(value)).digest()


def hash_function(algo: str) -> HashFunction:
    """vLLM's `get_hash_fn_by_name` for the v0.11.0 choices."""
    if algo == "sha256":
        return _sha256
    if algo == "sha256_cbor":
        return _sha256_cbor
    raise ValueError(f"unknown prefix caching hash algorithm {algo!r}: one of {HASH_ALGOS}")


def seed_from_env() -> str | None:
    """The engine's hash seed: `PYTHONHASHSEED`, as vLLM reads it (None: random)."""
    return os.environ.get("PYTHONHASHSEED")


def none_hash(seed: str | None, algo: str = "sha256") -> bytes:
    """vLLM's `NONE_HASH`: the parent of every chain's first block."""
    return os.urandom(32) if seed is None else hash_function(algo)(seed)


def to_external(block_hash: bytes) -> int:
    """The int a KV event carries for a block hash (its low 64 bits, big-endian)."""
    return int.from_bytes(block_hash, "big") & MASK64


def block_hashes(
    token_ids: Sequence[int],
    root: bytes,
    *,
    block_size: int = 16,
    lora_id: int | None = None,
    cache_salt: str | None = None,
    hash_fn: HashFunction = _sha256,
) -> list[bytes]:
    """The chained hash of every full block of `token_ids`, from `root` (`none_hash`),
    with vLLM's extra keys: the LoRA int id in every block, the salt in the first."""
    out: list[bytes] = []
    parent = root
    every = (lora_id,) if lora_id else None  # vLLM: `if not request.lora_request`
    first = (*(every or ()), cache_salt) if cache_salt else every
    extra = first
    for start in range(0, len(token_ids) - block_size + 1, block_size):
        parent = hash_fn((parent, tuple(token_ids[start : start + block_size]), extra))
        out.append(parent)
        extra = every
    return out
