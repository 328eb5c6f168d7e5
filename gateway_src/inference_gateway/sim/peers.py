"""Peer routers, re-implemented from their public code and docs so the simulator can
compare our gateway against what a platform team would otherwise deploy.

The simulator has no prompt text: a request is `prefix_group` (one of the scenario's
shared system prompts, as fixed block ids, see `workload.prefix_block_ids`) followed by a
unique tail that shares nothing with any other request. Each peer's prefix structure is
therefore kept over *shared-prefix units*: a unit is one 16-token block id for the
token- and character-based trees, and a pair of blocks (128 characters ≈ 32 tokens at
~4 characters per token) for production-stack's 128-character chunks. Tails are never
inserted as units: they could never match anything, so they change no decision (their
only effect upstream is on tree size, which matters only to eviction; see each class).

Conversation turns (`workload.Sessions`) carry their own shareable block ids (the system
prompt's, then the session's): the trees key units by those ids, so a turn matches the
previous turn's prompt wherever the peer sent it, as the real trees match the text.

Peers see only what their real counterparts see: their own in-flight counts and request
rates (all three), and for Dynamo the engines' KV events, i.e. the pod's real cached
blocks (read from the engine pool: events are pushed per block, so the router's index
lags the engine by far less than a scrape interval).
"""

from __future__ import annotations

import math
import random
from collections import deque

from inference_gateway.sim.pods import SimPod
from inference_gateway.sim.workload import (
    BLOCK_TOKENS,
    SimRequest,
    prefix_block_ids,
    shared_blocks,
)

__all__ = ["DynamoKV", "ProductionStackPrefixAware", "SGLangCacheAware"]

CHARS_PER_TOKEN = 4  # the usual English BPE ratio; turns 128-char chunks into tokens


class _Peer:
    """Shared plumbing: candidate filtering (a pod must serve the adapter, as each
    peer filters workers by model) and no-op outcome hooks."""

    needs_scrapes = False

    def __init__(self, name: str, pods: list[SimPod], seed: int) -> None:
        self.name = name
        self.pods = pods
        self.random = random.Random(seed)

    def candidates(self, request: SimRequest) -> list[SimPod]:
        if request.adapter is None:
            return self.pods
        return [p for p in self.pods if request.adapter in p.pool.adapters]

    def on_first_token(self, request: SimRequest, pod: SimPod, ttft: float, now: float) -> None:
        return None

    def on_finished(self, request: SimRequest, pod: SimPod, now: float) -> None:
        return None


class ProductionStackPrefixAware(_Peer):
    """vLLM production-stack router, `--routing-logic prefixaware`.

    Source: vllm-project/production-stack, `src/vllm_router/routers/routing_logic.py`
    (`PrefixAwareRouter`) and `src/vllm_router/prefix/hashtrie.py` (`HashTrie`).

    * The prompt is cut into 128-character chunks, each hashed with xxhash64, and kept in a
      trie whose every node records the endpoints that were sent a prompt through it.
      There is no eviction (the class docstring: "we assume that there is no eviction of
      prefix cache").
    * `longest_prefix_match` walks the trie, narrowing the candidate set to the endpoints
      at each matched node; with a match it picks uniformly at random among the
      endpoints of the deepest node; below `prefix_min_match_length` (any match here)
      it falls back to `_qps_routing`: the endpoint with the lowest request rate over the
      router's stats window (an endpoint with no recorded request wins at once).
    * The chosen endpoint is inserted along the prompt's whole path.

    Consequence (faithful, and visible in the results): once a shared prefix has been
    sent somewhere, every later request with it matches that endpoint set and goes to
    one of its members, so the set never grows: each system prompt stays pinned to the
    pods that first saw it, whatever their load.

    Parameters: `chunk_chars` 128, `qps_window_s` 60 (the router's request-stats window).
    """

    chunk_chars = 128
    qps_window_s = 60.0

    def __init__(self, name: str, pods: list[SimPod], seed: int) -> None:
        super().__init__(name, pods, seed)
        self.holders: dict[int, set[int]] = {}  # chunk (its last block id) → pod indices
        self.arrivals: list[deque[float]] = [deque() for _ in pods]
        self.seen: set[int] = set()  # pods that have recorded any request

    def chunks(self, request: SimRequest) -> list[int]:
        """Trie path of the request's fully shared chunks (the chunk that straddles the
        end of the shared blocks holds tail characters, so it is unique), each named by
        its last block id (ids are chained: one names its whole prefix)."""
        ids = shared_blocks(request)
        per_chunk = self.chunk_chars // CHARS_PER_TOKEN // BLOCK_TOKENS  # blocks per chunk
        return [ids[(i + 1) * per_chunk - 1] for i in range(len(ids) // per_chunk)]

    def qps(self, pod: SimPod, now: float) -> float:
        window = self.arrivals[pod.index]
        while window and window[0] <= now - self.qps_window_s:
            window.popleft()
        return len(window) / self.qps_window_s

    def route(self, request: SimRequest, now: float) -> SimPod | None:
        pods = self.candidates(request)
        if not pods:
            return None
        path = self.chunks(request)
        selected = {p.index for p in pods}
        matched = 0
        for chunk in path:
            here = self.holders.get(chunk)
            narrowed = selected & here if here else set()
            if not narrowed:
                break
            selected, matched = narrowed, matched + 1
        if matched:
            pod = self.pods[self.random.choice(sorted(selected))]
        else:
            pod = self.lowest_qps(pods, now)
        for chunk in path:
            self.holders.setdefault(chunk, set()).add(pod.index)
        self.arrivals[pod.index].append(now)
        self.seen.add(pod.index)
        return pod

    def lowest_qps(self, pods: list[SimPod], now: float) -> SimPod:
        best, best_qps = pods[0], math.inf
        for pod in pods:
            if pod.index not in self.seen:
                return pod
            rate = self.qps(pod, now)
            if rate < best_qps:
                best, best_qps = pod, rate
        return best


class SGLangCacheAware(_Peer):
    """SGLang router (sgl-router), `--policy cache_aware`.

    Source: sgl-project/sglang, `sgl-router/src/policies/cache_aware.rs` and `tree.rs`;
    parameters from `launch_router --help`.

    * Load is the router's own count of requests in flight per worker.
    * Imbalanced when `max_load − min_load > balance_abs_threshold` **and**
      `max_load > balance_rel_threshold × min_load`: route to the least-loaded worker
      (and still insert the prompt into its tree).
    * Otherwise walk the approximate radix tree of prompt *characters*: match rate =
      matched characters / prompt characters. Above `cache_threshold`, route to the
      worker the deepest matched node belongs to; at or below it, route to the
      least-loaded worker (current code; releases before 2025 picked the worker with the
      smallest tree, which is the least-loaded one in a steady state).
    * Insert the prompt for the chosen worker.

    Adaptation: the matched characters of a request are its leading shared blocks that
    the tree holds (4 characters per token cancel in the ratio), so match rate = matched
    blocks × 16 / prompt tokens. The deepest node's tenant is taken from an unordered
    map upstream; we draw uniformly (seeded) among the workers holding it. LRU eviction
    (every `eviction_interval` 60 s down to `max_tree_size`) trims cold leaves first; hot
    system prompts are touched on every request and survive it, so it is not modelled.

    Parameters: `cache_threshold` 0.5, `balance_abs_threshold` 32,
    `balance_rel_threshold` 1.1 (current releases default to 1.0001, which changes
    nothing once the absolute threshold of 32 is crossed).
    """

    cache_threshold = 0.5
    balance_abs_threshold = 32
    balance_rel_threshold = 1.1

    def __init__(self, name: str, pods: list[SimPod], seed: int) -> None:
        super().__init__(name, pods, seed)
        self.load = [0] * len(pods)
        self.tenants: dict[int, set[int]] = {}  # tree node (block id) → pods holding it

    def imbalanced(self) -> bool:
        high, low = max(self.load), min(self.load)
        return high - low > self.balance_abs_threshold and high > self.balance_rel_threshold * low

    def least_loaded(self, pods: list[SimPod]) -> SimPod:
        return min(pods, key=lambda p: self.load[p.index])

    def match_rate(self, request: SimRequest, pods: list[SimPod]) -> tuple[float, list[SimPod]]:
        """Walk the tree: the deepest node some candidate holds, and its holders."""
        allowed = {p.index for p in pods}
        matched, holders = 0, set()
        for i, block in enumerate(shared_blocks(request)):
            here = self.tenants.get(block)
            found = here & allowed if here else set()
            if not found:
                break
            matched, holders = i + 1, found
        if not matched:
            return 0.0, []
        owners = [p for p in pods if p.index in holders]
        return matched * BLOCK_TOKENS / request.prompt_tokens, owners

    def route(self, request: SimRequest, now: float) -> SimPod | None:
        pods = self.candidates(request)
        if not pods:
            return None
        if self.imbalanced():
            pod = self.least_loaded(pods)
        else:
            rate, owners = self.match_rate(request, pods)
            if owners and rate > self.cache_threshold:
                pod = owners[self.random.randrange(len(owners))]
            else:
                pod = self.least_loaded(pods)
        for block in shared_blocks(request):
            self.tenants.setdefault(block, set()).add(pod.index)
        self.load[pod.index] += 1
        return pod

    def on_finished(self, request: SimRequest, pod: SimPod, now: float) -> None:
        self.load[pod.index] -= 1


class DynamoKV(_Peer):
    """NVIDIA Dynamo KV router (`--router-mode kv`).

    Source: ai-dynamo/dynamo, `docs/router/kv_cache_routing.md` ("Cost Calculation") and
    `lib/llm/src/kv_router/scheduler.rs` (`DefaultWorkerSelector`).

    Per worker, lower is better:

        cost = overlap_score_weight × prefill_blocks + decode_blocks

    * prefill_blocks: (tokens of the worker's requests still in prefill + this request's
      tokens not cached there) / block size. The router marks a request's prefill done at
      its first token.
    * decode_blocks: KV blocks of the worker's active requests if this one were added,
      shared blocks counted once (the router's `ActiveSequences`), freed when a request
      ends.
    * cached blocks come from KV events (`KvIndexer`), i.e. the pod's real prefix cache:
      read here from the engine's block pool.
    * `router_temperature` 0: the lowest cost wins; ties are broken at random.

    Parameters: `overlap_score_weight` 1.0, `block_size` 16, temperature 0 (defaults).
    """

    overlap_score_weight = 1.0
    block_size = BLOCK_TOKENS

    def __init__(self, name: str, pods: list[SimPod], seed: int) -> None:
        super().__init__(name, pods, seed)
        self.prefill_tokens = [0] * len(pods)
        self.unique_blocks = [0] * len(pods)  # active blocks not shared with anyone
        self.shared: list[dict[int, int]] = [{} for _ in pods]  # group → active requests
        self.group_blocks: dict[int, int] = {}
        self._active: dict[int, tuple[int, int, int]] = {}  # request → prefill, unique, group

    def _blocks(self, request: SimRequest) -> tuple[tuple[int, ...], int]:
        """The request's shared block ids and its count of unshared blocks."""
        total = -(-request.prompt_tokens // self.block_size)
        if request.block_ids:  # a conversation turn: its blocks are its session's alone
            return request.block_ids, total
        if request.prefix_group is None:
            return (), total
        ids = prefix_block_ids(request.prefix_group, request.prefix_tokens)
        return ids, total - len(ids)

    def cost(self, pod: SimPod, request: SimRequest) -> tuple[float, int]:
        """(cost, uncached prompt tokens) of sending `request` to `pod`."""
        shared_ids, unique = self._blocks(request)
        overlap = pod.engine.pool.match_prefix(shared_ids) if shared_ids else 0
        new_tokens = max(0, request.prompt_tokens - overlap * self.block_size)
        i = pod.index
        prefill_blocks = (self.prefill_tokens[i] + new_tokens) / self.block_size
        decode = self.unique_blocks[i] + unique + sum(self.group_blocks[g] for g in self.shared[i])
        group = request.prefix_group
        if shared_ids and not request.block_ids and group not in self.shared[i]:
            decode += len(shared_ids)
        return self.overlap_score_weight * prefill_blocks + decode, new_tokens

    def route(self, request: SimRequest, now: float) -> SimPod | None:
        pods = self.candidates(request)
        if not pods:
            return None
        best: list[tuple[SimPod, int]] = []
        best_cost = math.inf
        for pod in pods:
            cost, new_tokens = self.cost(pod, request)
            if cost < best_cost:
                best, best_cost = [(pod, new_tokens)], cost
            elif cost == best_cost:
                best.append((pod, new_tokens))
        pod, new_tokens = best[self.random.randrange(len(best))] if len(best) > 1 else best[0]
        shared_ids, unique = self._blocks(request)
        i = pod.index
        self.prefill_tokens[i] += new_tokens
        self.unique_blocks[i] += unique
        group = -1  # a conversation turn's blocks are its session's alone
        if shared_ids and not request.block_ids and request.prefix_group is not None:
            group = request.prefix_group
        if group >= 0:
            self.group_blocks[group] = len(shared_ids)
            self.shared[i][group] = self.shared[i].get(group, 0) + 1
        self._active[request.request_id] = (new_tokens, unique, group)
        return pod

    def on_first_token(self, request: SimRequest, pod: SimPod, ttft: float, now: float) -> None:
        state = self._active.get(request.request_id)
        if state is not None and state[0]:
            self.prefill_tokens[pod.index] -= state[0]
            self._active[request.request_id] = (0, state[1], state[2])

    def on_finished(self, request: SimRequest, pod: SimPod, now: float) -> None:
        state = self._active.pop(request.request_id, None)
        if state is None:
            return
        prefill, unique, group = state
        i = pod.index
        self.prefill_tokens[i] -= prefill
        self.unique_blocks[i] -= unique
        if group >= 0:
            left = self.shared[i][group] - 1
            if left:
                self.shared[i][group] = left
            else:
                del self.shared[i][group]
