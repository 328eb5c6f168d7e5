"""Block hashes against vLLM v0.11.0's own definitions, transcribed here on their own.

The reference below is written from vllm-project/vllm v0.11.0 (the tree pins
`vllm/vllm-openai:v0.11.0`), not from `block_hashing`:

* `vllm/utils/__init__.py`: `sha256(input)` = sha256 of `pickle.dumps(input,
  protocol=pickle.HIGHEST_PROTOCOL)`; `sha256_cbor(input)` = sha256 of
  `cbor2.dumps(input, canonical=True)`; `get_hash_fn_by_name` knows only these two,
  the choices of `--prefix-caching-hash-algo` (`vllm/config/cache.py`
  `PrefixCachingHashAlgo = Literal["sha256", "sha256_cbor"]`, default "sha256");
* `vllm/v1/core/kv_cache_utils.py`: `init_none_hash` (`NONE_HASH = hash_fn(PYTHONHASHSEED)`),
  `hash_block_tokens`, `_gen_lora_extra_hash_keys` (`[lora_request.lora_int_id]`),
  `generate_block_hash_extra_keys` (`lora + mm + cache_salt`, the salt only where
  `start_token_idx == 0`, `None` when empty), `get_request_block_hasher` (full blocks
  only), `maybe_convert_block_hash` (low 64 bits, big-endian);
* CBOR for `sha256_cbor`: the reference encoder follows RFC 8949 §3.1 and §4.2.1 and is
  itself checked against the RFC's Appendix A examples. `VECTORS` were computed by those
  vLLM functions with the real `cbor2` (5.7.0) and pickle on CPython 3.11, so each of the
  three (vectors, reference, `block_hashing`) checks the others.
"""

from __future__ import annotations

import hashlib
import pickle
import random
import struct
from collections.abc import Callable
from typing import Any

import pytest

from inference_gateway.protocols.vllm import block_hashing


# ---- the reference, from vLLM v0.11.0 ---------------------------------------------------
def rfc8949(value: Any) -> bytes:
    """Preferred (deterministic) serialization of the values a block key holds."""

    def head(major: int, arg: int) -> bytes:
        for limit, extra, fmt in ((24, 0, ""), (256, 24, "B"), (65536, 25, "H"),
                                  (2**32, 26, "I"), (2**64, 27, "Q")):  # fmt: skip
            if arg < limit:
                first = bytes([(major << 5) | (extra or arg)])
                return first + (struct.pack(">" + fmt, arg) if fmt else b"")
        raise ValueError(arg)

    if value is None:
        return b"\xf6"
    if isinstance(value, int):
        return head(0, value) if value >= 0 else head(1, -1 - value)
    if isinstance(value, bytes):
        return head(2, len(value)) + value
    if isinstance(value, str):
        return head(3, len(value.encode())) + value.encode()
    if isinstance(value, (tuple, list)):
        return head(4, len(value)) + b"".join(rfc8949(v) for v in value)
    raise TypeError(type(value))


def sha256(input: Any) -> bytes:
    return hashlib.sha256(pickle.dumps(input, protocol=pickle.HIGHEST_PROTOCOL)).digest()


def sha256_cbor(input: Any) -> bytes:
    return hashlib.sha256(rfc8949(input)).digest()


HASH_FNS: dict[str, Callable[[Any], bytes]] = {"sha256": sha256, "sha256_cbor": sha256_cbor}


def vllm_block_hashes(
    algo: str,
    seed: str,
    token_ids: list[int],
    block_size: int = 16,
    lora_int_id: int | None = None,
    cache_salt: str | None = None,
) -> list[int]:
    hash_fn = HASH_FNS[algo]
    none_hash = hash_fn(seed)  # init_none_hash with PYTHONHASHSEED set
    out: list[int] = []
    prev: bytes | None = None
    start = 0
    while start + block_size <= len(token_ids):  # "We only hash full blocks"
        lora_keys = [lora_int_id] if lora_int_id else []
        salt_keys = [cache_salt] if (start == 0 and cache_salt) else []
        keys = lora_keys + salt_keys
        extra = tuple(keys) if keys else None
        parent = prev if prev else none_hash
        prev = hash_fn((parent, tuple(token_ids[start : start + block_size]), extra))
        out.append(int.from_bytes(prev, byteorder="big") & ((1 << 64) - 1))
        start += block_size
    return out


# computed by vLLM v0.11.0's functions with the real cbor2 (see the module docstring)
IDS = [128000, 128006, 882, 128007, 271, *range(1000, 1043)]  # 48 tokens: 3 blocks
VECTORS: dict[str, dict[str, Any]] = {
    "sha256": {
        "none_hash_0": "1973e23848344dc43a988a9b478663803cfffe1243480253f9a3cf004b14aa7c",
        "plain_seed0": [5340801611798095556, 7304818676178296602, 7077773386794556216],
        "plain_seed42": [11432177846000997178, 14202297134104847290, 14764984024334707492],
        "lora1_seed0": [357860276994329361, 2925856098105800532, 1770637192392221046],
        "salt_seed0": [3964860878816910320, 7156729183295167461, 10219847267446241687],
        "lora2_salt_seed0_bs32": [1093164816630511464, 6479623380302873308],
    },
    "sha256_cbor": {
        "none_hash_0": "4e1195df020de59e0d65a33a4279f1183e7ae4e5d980e309f8b55adff2e61c3e",
        "plain_seed0": [17806330993449794975, 17852725810394409995, 7779886269291210555],
        "plain_seed42": [13334091893011440280, 10669868194139632100, 386785423568417366],
        "lora1_seed0": [16401270398115900632, 18117435981417448576, 980716065444314164],
        "salt_seed0": [12862268007836519997, 2511241570168740620, 1870898467397576522],
        "lora2_salt_seed0_bs32": [524611865597421789, 3412686385958866170],
    },
}
CASES: dict[str, dict[str, Any]] = {
    "plain_seed0": {"seed": "0", "ids": IDS},
    "plain_seed42": {"seed": "42", "ids": IDS},
    "lora1_seed0": {"seed": "0", "ids": IDS, "lora_int_id": 1},
    "salt_seed0": {"seed": "0", "ids": IDS, "cache_salt": "s3cr3t"},
    "lora2_salt_seed0_bs32": {
        "seed": "0", "ids": IDS[:32] + IDS[:32], "block_size": 32, "lora_int_id": 2,
        "cache_salt": "s3cr3t",
    },
}  # fmt: skip


def ours(algo: str, case: dict[str, Any]) -> list[int]:
    root = block_hashing.none_hash(case["seed"], algo)
    hashed = block_hashing.block_hashes(
        case["ids"],
        root,
        block_size=case.get("block_size", 16),
        lora_id=case.get("lora_int_id"),
        cache_salt=case.get("cache_salt"),
        hash_fn=block_hashing.hash_function(algo),
    )
    return [block_hashing.to_external(h) for h in hashed]


# ---- the checks --------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("value", "encoded"),
    [(0, "00"), (23, "17"), (24, "1818"), (100, "1864"), (1000, "1903e8"),
     (1000000, "1a000f4240"), (1000000000000, "1b000000e8d4a51000"),
     (18446744073709551615, "1bffffffffffffffff"), (-1, "20"), (-1000, "3903e7"),
     (None, "f6"), (b"", "40"), (b"\x01\x02\x03\x04", "4401020304"), ("", "60"),
     ("IETF", "6449455446"), ("\u00fc", "62c3bc"), ((), "80"), ((1, 2, 3), "83010203"),
     ((1, (2, 3), (4, 5)), "8301820203820405"),
     (tuple(range(1, 26)), "98190102030405060708090a0b0c0d0e0f101112131415161718181819")],
)  # fmt: skip
def test_cbor_encodings_are_rfc_8949s_appendix_a(value: Any, encoded: str) -> None:
    """RFC 8949 Appendix A's examples (the value types a block key can hold)."""
    assert rfc8949(value).hex() == encoded
    assert block_hashing.cbor_encode(value).hex() == encoded


@pytest.mark.parametrize("algo", ["sha256", "sha256_cbor"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_hashes_are_vllm_v0_11_0s(algo: str, case: str) -> None:
    """The vectors, the transcription and the implementation agree, for both choices of
    `--prefix-caching-hash-algo`, with a LoRA adapter's int id and a cache salt."""
    spec = CASES[case]
    want = VECTORS[algo][case]
    reference = vllm_block_hashes(
        algo,
        spec["seed"],
        spec["ids"],
        spec.get("block_size", 16),
        spec.get("lora_int_id"),
        spec.get("cache_salt"),
    )
    assert reference == want
    assert ours(algo, spec) == want
    assert block_hashing.none_hash("0", algo).hex() == VECTORS[algo]["none_hash_0"]


def test_random_prompts_hash_as_vllm_does() -> None:
    rnd = random.Random(30)
    for _ in range(60):
        algo = rnd.choice(["sha256", "sha256_cbor"])
        case = {
            "seed": str(rnd.randrange(1 << 32)),
            "ids": [rnd.randrange(1 << rnd.choice((7, 17, 31))) for _ in range(rnd.randrange(90))],
            "block_size": rnd.choice((1, 8, 16, 32)),
            "lora_int_id": rnd.choice((None, 1, 3, 70000)),
            "cache_salt": rnd.choice((None, "", "salt-é")),
        }
        reference = vllm_block_hashes(
            algo, case["seed"], case["ids"], case["block_size"],
            case["lora_int_id"], case["cache_salt"],
        )  # fmt: skip
        assert ours(algo, case) == reference


def test_only_the_v0_11_0_algorithms_are_known() -> None:
    assert block_hashing.HASH_ALGOS == ("sha256", "sha256_cbor")
    with pytest.raises(ValueError, match="builtin"):
        block_hashing.hash_function("builtin")  # gone in v0.10; xxhash came after v0.11
