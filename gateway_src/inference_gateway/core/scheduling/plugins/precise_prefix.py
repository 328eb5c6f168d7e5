"""`precise-prefix-cache-scorer` (llm-d's name): prefix affinity from the pods' own KV events.

Per request, the prompt is tokenized as the pod will tokenize it and hashed block by
block exactly as the pinned vLLM hashes it (`block_hashing`), so the parameters must be
the pods' own (the charts render them from environment.yaml):

* `blockSize` (`--block-size`), `hashAlgo` (`--prefix-caching-hash-algo`: sha256, the
  default, or sha256_cbor) and `hashSeed` (the pods' `PYTHONHASHSEED`);
* `tokenizer`: `emulator` (the emulator's rule), `none` (no precise hashes: the
  approximate index), or a directory holding the served model's own tokenizer files
  (`tokenizer_files`: loaded when they arrive); `models` overrides it per model name the
  pods serve, with each LoRA adapter's `loraId` (vLLM keys an adapter's blocks by the
  int id it numbers `--lora-modules` with, 1, 2, … in flag order). An adapter whose id
  is not given gets no precise hashes, rather than hashes no pod holds.

A request's `cache_salt` salts its first block, as vLLM does. `KVBlockIndex` says how
many leading blocks each pod really holds; whether a pod's events carry the blocks
hashed here at all is checked for each request that reached its first token, when it
finishes (`KVBlockIndex.check`: a pod whose events never match is logged, counted, and
scored as stale).

Blocks the picker has just sent a pod are not in its events until the pod admits the
request, so a burst of one new system prompt would scatter; until a request's first
token, its blocks count as held by its pod (`pending`), as upstream's approximate index
counts a pick at once. The pod's events take over from there, evictions included.

For a pod whose events are stale (`KVBlockIndex.fresh`; a pod never heard from has no
events to trust either), the approximate index's match is used instead, each decision
for a stale pod counted (`KVBlockIndex.fallbacks`, exported as
`igw_kv_events_fallback_total`). The matches land on `request.prefix_matches`, which
the predicted-TTFT scorer and the scheduler's pending-prefill count read: they see the
pod's real cached length, not where earlier prompts were sent.

Two uses, two sources, because the simulator showed they differ under KV pressure
(the `kv-pressure` scenario, docs/benchmarks.md): the *cost* of a pod
(`prefix_matches`) is what its events say it holds, so no pod is credited with a cache
it evicted; the *affinity* score is the longer of that and what the approximate index
says was sent there (over the prompt's blocks, as upstream's prefix score), so a
customer whose context was evicted everywhere goes back to the pod it was last sent to,
where its next requests will find it rebuilt, instead of to whichever pod looks idlest,
which scatters evicted contexts and keeps every cache churning (an events-only affinity
had a 2.5x worse P50 there).

Each pick tells the index how many tokens it computes and how many of them the fleet
had cached and evicted (`KVBlockIndex.note_pick`, the recompute share the predicted-TTFT
scorer prices evictions by).

`prepare` runs once per scheduling cycle, before any scorer (the scheduler calls it), so
the order of scorers in a profile does not matter.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pydantic import Field

from inference_gateway.core.scheduling.kv_index import MAX_BLOCK_SIZE, KVBlockIndex
from inference_gateway.core.scheduling.plugins.base import Params
from inference_gateway.core.scheduling.plugins.prefix import PrefixIndex
from inference_gateway.core.scheduling.tokenizer_files import EMULATOR, TokenizerSource
from inference_gateway.core.scheduling.types import Endpoint, LLMRequest, PluginContext
from inference_gateway.protocols.vllm.block_hashing import (
    HashAlgo,
    block_hashes,
    hash_function,
    none_hash,
    to_external,
)

TYPE = "precise-prefix-cache-scorer"

__all__ = ["TYPE", "ModelHashing", "PrecisePrefixParams", "PrecisePrefixScorer", "build"]


class ModelHashing(Params):
    """How the pods tokenize one model name they serve (a base model or an adapter)."""

    tokenizer: str = Field(description="emulator, none, or the model's tokenizer directory")
    lora_id: int | None = Field(
        default=None, ge=1, description="An adapter's int id in vLLM (its --lora-modules place)"
    )


class PrecisePrefixParams(Params):
    block_size: int = Field(default=16, ge=1, le=MAX_BLOCK_SIZE)  # the pods' --block-size
    hash_algo: HashAlgo = "sha256"  # the pods' --prefix-caching-hash-algo
    hash_seed: str = "0"  # the pods' PYTHONHASHSEED (vLLM's NONE_HASH seed)
    tokenizer: str = EMULATOR  # "emulator", "none", or a local directory with tokenizer.json
    models: dict[str, ModelHashing] = Field(default_factory=dict)  # per served model name
    stale_after_s: float = 2.0  # no event this long after sending new blocks: fall back
    events_port: int = 5557  # where pods publish (--kv-events-config endpoint port)
    events_label: str = "igw.dev/kv-events"  # a pod label with its full endpoint wins
    # where pods answer replays (--kv-events-config replay_endpoint port); none: only a
    # pod whose label igw.dev/kv-events-replay names its endpoint is asked after a gap
    replay_port: int | None = Field(default=None, ge=1, le=65535)


def _cache_salt(body: Mapping[str, Any]) -> str | None:
    """vLLM salts the first block with a non-empty string `cache_salt` (else it is a 400)."""
    salt = body.get("cache_salt")
    return salt if isinstance(salt, str) and salt else None


class PrecisePrefixScorer:
    def __init__(
        self,
        name: str,
        params: PrecisePrefixParams,
        kv_index: KVBlockIndex,
        approximate: PrefixIndex | None,
    ) -> None:
        self.name = name
        self.params = params
        self.kv_index = kv_index
        self.approximate = approximate
        # one source per tokenizer spec (models of one base share theirs)
        specs = {params.tokenizer, *(m.tokenizer for m in params.models.values())}
        self.tokenizers = {spec: TokenizerSource(spec) for spec in sorted(specs)}
        self._hash_fn = hash_function(params.hash_algo)
        self._root = none_hash(params.hash_seed, params.hash_algo)
        kv_index.stale_after_s = params.stale_after_s
        kv_index.rehash = self._rehash
        kv_index.hashing = (
            f"blockSize {params.block_size}, hashAlgo {params.hash_algo}, "
            f"hashSeed {params.hash_seed!r}, tokenizer {params.tokenizer}"
            + "".join(f", {m}: {h.tokenizer}" for m, h in sorted(params.models.items()))
        )
        # request → (pod, hashes, pick time on the index's clock): until its first
        # token in `_pending`, then until it finishes in `_prefilled`
        self._pending: dict[str, tuple[str, Sequence[int], float]] = {}
        self._prefilled: dict[str, tuple[str, Sequence[int], float]] = {}
        self._pending_at: dict[str, dict[str, Sequence[int]]] = {}  # pod → request → hashes
        # the last request's approximate matches: valid until the index next changes
        self._sent_cache: tuple[LLMRequest, dict[str, int]] | None = None

    def request_hashes(self, request: LLMRequest) -> list[int]:
        """The engine's block hashes of the prompt (cached on the request)."""
        if request.kv_hashes is not None:
            return list(request.kv_hashes)
        body = request.prompt_body
        out: list[int] = []
        entry = self.params.models.get(request.model)
        spec = entry.tokenizer if entry is not None else self.params.tokenizer
        lora_id = entry.lora_id if entry is not None else None
        tokenizer = self.tokenizers[spec].get()
        if body and tokenizer is not None and (lora_id is not None or not request.adapter):
            ids = tokenizer.prompt_ids(body)
            if ids:
                hashed = block_hashes(
                    ids,
                    self._root,
                    block_size=self.params.block_size,
                    lora_id=lora_id,
                    cache_salt=_cache_salt(body),
                    hash_fn=self._hash_fn,
                )
                out = [to_external(h) for h in hashed]
        request.kv_hashes = out
        return out

    def _rehash(self, tokens: Sequence[int], block_size: int) -> int | None:
        """A chain's first block hashed here (None: the pod's block size is not ours)."""
        if block_size != self.params.block_size:
            return None
        return to_external(self._hash_fn((self._root, tuple(tokens), None)))

    def prepare(self, request: LLMRequest, endpoints: list[Endpoint]) -> None:
        """Set `request.prefix_matches` from the events (approximate for stale pods)."""
        kv, fresh = self.kv_index, self.kv_index.fresh
        if not kv.heard_any:  # no pod publishes events (yet): the approximate index alone
            request.prefix_matches = self._sent_matches(request)
            return
        live = [fresh(e.name) for e in endpoints]
        # hashed while some pod's events are trusted, or a pod's failed to match (the
        # pick's check after its first token is how that pod can earn trust back)
        hashed = any(live) or not all(kv.matching(e.name) for e in endpoints)
        hashes = self.request_hashes(request) if hashed else []
        precise = kv.matches(hashes) if hashes else {}
        approx: dict[str, int] | None = None
        matches: dict[str, int] = {}
        for e, is_fresh in zip(endpoints, live, strict=True):
            if is_fresh:
                found = precise.get(e.name, 0)
                pending = self._pending_at.get(e.name)
                if pending and hashes:
                    found = max(found, _longest_common(hashes, pending.values()))
            else:
                if approx is None:
                    approx = self._sent_matches(request)
                found = approx.get(e.name, 0)
                if kv.heard_from(e.name):
                    kv.fallbacks += 1
            if found:
                matches[e.name] = found
        request.prefix_matches = matches

    def score(self, request: LLMRequest, endpoints: list[Endpoint]) -> list[float]:
        """Affinity: the longer of what the pod holds (events) and what was sent to it
        (the approximate index), over the prompt's blocks (see the module docstring)."""
        if request.prefix_matches is None:
            self.prepare(request, endpoints)
        matches = request.prefix_matches or {}
        blocks = request.prompt_tokens // self.params.block_size
        total = max(len(request.kv_hashes or ()), blocks, 1)
        sent = self._sent_matches(request)
        best = sent  # the longer of held and sent, per pod
        if matches is not sent:  # else no pod's events yet: `prepare` answered `sent`
            best = dict(sent)
            for pod, held in matches.items():
                if held > best.get(pod, 0):
                    best[pod] = held
        if not best:
            return [0.0] * len(endpoints)
        get, inverse = best.get, 1.0 / total
        return [min(1.0, get(e.name, 0) * inverse) for e in endpoints]

    def _sent_matches(self, request: LLMRequest) -> dict[str, int]:
        """What the approximate index says was sent to each pod: computed once per
        request (`prepare` and `score` both read it)."""
        cached = self._sent_cache
        if cached is not None and cached[0] is request:
            return cached[1]
        sent = (
            self.approximate.matches(request.prefix_hashes)
            if self.approximate is not None and request.prefix_hashes
            else {}
        )
        self._sent_cache = (request, sent)
        return sent

    def on_picked(self, request: LLMRequest, endpoint: Endpoint, now: float) -> None:
        self._sent_cache = None  # the approximate index records this pick
        m = endpoint.metrics
        if m is not None and m.num_gpu_blocks:
            self.kv_index.set_capacity(endpoint.name, m.num_gpu_blocks)
        hashes = request.kv_hashes
        if not hashes:
            return
        matches = request.prefix_matches or {}
        held = matches.get(endpoint.name, 0)
        if held < len(hashes):
            self.kv_index.expect(endpoint.name)
        size = self.params.block_size
        computed = max(0, request.prompt_tokens - held * size)
        self.kv_index.note_pick(hashes, max(matches.values(), default=0), computed, size)
        picked_at = self.kv_index.clock()
        self._pending[request.request_id] = (endpoint.name, hashes, picked_at)
        self._pending_at.setdefault(endpoint.name, {})[request.request_id] = hashes

    def _started(self, request: LLMRequest) -> tuple[str, Sequence[int], float] | None:
        entry = self._pending.pop(request.request_id, None)
        if entry is not None:
            at = self._pending_at.get(entry[0])
            if at is not None:
                at.pop(request.request_id, None)
                if not at:
                    del self._pending_at[entry[0]]
        return entry

    def on_first_token(
        self, request: LLMRequest, endpoint: Endpoint, ttft_s: float, now: float
    ) -> None:
        """The pod has prefilled the prompt: when the request finishes, its events
        should hold the last block hashed here (a remote prefill's blocks are the
        prefill pod's business)."""
        entry = self._started(request)
        if entry is not None and entry[0] == endpoint.name and not request.remote_prefill:
            self._prefilled[request.request_id] = entry

    def on_finished(self, request: LLMRequest, endpoint: Endpoint, now: float) -> None:
        self._started(request)
        entry = self._prefilled.pop(request.request_id, None)
        if entry is not None:
            self.kv_index.check(entry[0], entry[1][-1], entry[2])
        self.kv_index.settle()


def _longest_common(hashes: Sequence[int], others: Iterable[Sequence[int]]) -> int:
    """The longest leading run `hashes` shares with any of `others`."""
    best, first = 0, hashes[0]
    for other in others:
        if not other or other[0] != first:
            continue
        n = min(len(hashes), len(other))
        i = 1
        while i < n and hashes[i] == other[i]:
            i += 1
        if i > best:
            best = i
    return best


def build(name: str, params: PrecisePrefixParams, context: PluginContext) -> PrecisePrefixScorer:
    """Built by the scheduler with its shared indexes (for validation, with fresh ones);
    a tokenizer file that cannot be read is a ValueError, so the config names it (a
    directory not there yet is waited for: `tokenizer_files`)."""
    kv_index = context.kv_index or KVBlockIndex()
    return PrecisePrefixScorer(name, params, kv_index, context.index)
