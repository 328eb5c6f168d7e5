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

from inference_gateway.core.scheduling.plugins.base import Params
from inference_gateway.core.scheduling.types import Endpoint, LLMRequest, PluginContext

TYPE = "prefix-cache-scorer"

__all__ = ["TYPE", "PrefixCacheScorer", "PrefixIndex", "prompt_block_hashes", "request_matches"]


def prompt_block_hashes(model: str, text: str, block_chars: int = 64) -> list[int]:
    """Chained xxhash64 of each full `block_chars` block of `text`."""
    data = text.encode()
    previous = xxhash.xxh64_intdigest(model.encode())
    out: list[int] = []
    for start in range(0, len(data) - block_chars + 1, block_chars):
        previous = xxhash.xxh64_intdigest(data[start : start + block_chars], seed=previous)
        out.append(previous)
    return out


class PrefixIndex:
    """Which prompt blocks each pod probably holds: one LRU of block hashes per pod.

    A request's blocks are recorded tail first, so the chain's root is the most recent
    entry and eviction takes a chain's tail blocks before its head, as vLLM frees a
    request's blocks in reverse. A pod therefore holds a block only if it holds every
    block before it in the chain, and its leading match is found by binary search:
    about log2(blocks) lookups per pod, whatever the fleet shares, instead of keeping a
    hash → pods map up to date on every insert and eviction (the picker's dearest step
    when it was one).
    """

    def __init__(self, default_capacity: int = 31_250) -> None:
        self.default_capacity = default_capacity
        self._lru: dict[str, OrderedDict[int, None]] = {}
        self._capacity: dict[str, int] = {}

    def set_capacity(self, pod: str, blocks: int) -> None:
        self._capacity[pod] = max(1, blocks)

    def matches(self, hashes: Sequence[int]) -> dict[str, int]:
        """Leading blocks of `hashes` held, per pod (pods with no match are absent)."""
        out: dict[str, int] = {}
        if not hashes:
            return out
        first, last = hashes[0], len(hashes)
        for pod, lru in self._lru.items():
            if first not in lru:
                continue
            held, missing = 1, last + 1  # held blocks: at least `held`, fewer than `missing`
            while missing - held > 1:
                middle = (held + missing) // 2
                if hashes[middle - 1] in lru:
                    held = middle
                else:
                    missing = middle
            out[pod] = held
        return out

    def add(self, pod: str, hashes: Sequence[int]) -> None:
        lru = self._lru.get(pod)
        if lru is None:
            lru = self._lru[pod] = OrderedDict()
        touch = lru.move_to_end
        for h in reversed(hashes):
            if h in lru:
                touch(h)
            else:
                lru[h] = None
        evict = lru.popitem
        for _ in range(len(lru) - self._capacity.get(pod, self.default_capacity)):
            evict(last=False)

    def forget(self, pod: str) -> None:
        self._lru.pop(pod, None)


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


def build(name: str, params: PrefixParams, context: PluginContext) -> PrefixCacheScorer:
    return PrefixCacheScorer(name, context.index)
