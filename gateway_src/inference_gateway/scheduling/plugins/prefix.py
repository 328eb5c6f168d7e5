"""`prefix-cache-scorer` and its approximate index.

The picker cannot see a pod's KV cache, so it remembers where it sent each prompt: the
prompt is cut into blocks of `block_chars` characters (64 ≈ 16 tokens, one vLLM block),
each block hashed with xxhash64 chained from the previous block's hash and seeded with
the model name (so the same text under two models never matches). After each pick the
request's blocks are recorded for the chosen pod in a per-pod LRU whose capacity follows
the pod's `vllm:cache_config_info` (num_gpu_blocks), as the pod's own cache would.

Score (upstream GIE): consecutive leading blocks found for the pod / total blocks.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

import xxhash

from ..types import Endpoint, LLMRequest
from .base import Params

TYPE = "prefix-cache-scorer"

__all__ = ["TYPE", "PrefixCacheScorer", "PrefixIndex", "prompt_block_hashes", "request_matches"]


def prompt_block_hashes(model: str, text: str, block_chars: int = 64) -> list[int]:
    """Chained xxhash64 of each full `block_chars` block of `text`."""
    data = text.encode()
    previous = xxhash.xxh64_intdigest(model.encode())
    out = []
    for start in range(0, len(data) - block_chars + 1, block_chars):
        previous = xxhash.xxh64_intdigest(data[start : start + block_chars], seed=previous)
        out.append(previous)
    return out


class PrefixIndex:
    """Which pod probably holds which prompt blocks: hash → pods, and an LRU per pod."""

    def __init__(self, default_capacity: int = 31_250) -> None:
        self.default_capacity = default_capacity
        self._pods: dict[int, set[str]] = {}
        self._lru: dict[str, OrderedDict[int, None]] = {}
        self._capacity: dict[str, int] = {}

    def set_capacity(self, pod: str, blocks: int) -> None:
        self._capacity[pod] = max(1, blocks)

    def matches(self, hashes: Sequence[int]) -> dict[str, int]:
        """Leading blocks of `hashes` held, per pod (pods with no match are absent)."""
        out: dict[str, int] = {}
        live: set[str] | None = None
        for depth, h in enumerate(hashes):
            pods = self._pods.get(h)
            if not pods:
                break
            live = set(pods) if live is None else live & pods
            if not live:
                break
            for pod in live:
                out[pod] = depth + 1
        return out

    def add(self, pod: str, hashes: Sequence[int]) -> None:
        lru = self._lru.setdefault(pod, OrderedDict())
        pods_by_hash = self._pods
        for h in hashes:
            if h in lru:
                lru.move_to_end(h)
                continue
            lru[h] = None
            holders = pods_by_hash.get(h)
            if holders is None:
                pods_by_hash[h] = {pod}
            else:
                holders.add(pod)
        capacity = self._capacity.get(pod, self.default_capacity)
        while len(lru) > capacity:
            old, _ = lru.popitem(last=False)
            holders = pods_by_hash[old]
            holders.discard(pod)
            if not holders:
                del pods_by_hash[old]

    def forget(self, pod: str) -> None:
        for h in self._lru.pop(pod, {}):
            holders = self._pods.get(h)
            if holders is not None:
                holders.discard(pod)
                if not holders:
                    del self._pods[h]


class PrefixParams(Params):
    block_size: int = 64  # characters per block (upstream `blockSize`)
    max_prefix_blocks_to_match: int = 256
    lru_capacity_per_server: int = 31_250


class PrefixCacheScorer:
    """Scores from the scheduler's shared `PrefixIndex` (matches computed once per request)."""

    def __init__(self, name: str, index: PrefixIndex) -> None:
        self.name = name
        self.index = index

    def score(self, request: LLMRequest, endpoints: list[Endpoint]) -> list[float]:
        if not request.prefix_hashes:
            return [0.0] * len(endpoints)
        # blocks of the whole prompt (callers may pass only the shareable leading blocks)
        total = max(len(request.prefix_hashes), request.prompt_tokens // 16)
        found = request_matches(self.index, request)
        return [found.get(e.name, 0) / total for e in endpoints]


def request_matches(index: PrefixIndex, request: LLMRequest) -> dict[str, int]:
    """Leading blocks per pod for this request, computed once per scheduling cycle."""
    if request.prefix_matches is None:
        request.prefix_matches = index.matches(request.prefix_hashes)
    return request.prefix_matches


def build(name: str, params: dict, *, index: PrefixIndex, **_: object) -> PrefixCacheScorer:
    PrefixParams.model_validate(params)
    return PrefixCacheScorer(name, index)
