"""`precise-prefix-cache-scorer` (llm-d's name): prefix affinity from the pods' own KV events.

Per request, the prompt is tokenized as the pod will tokenize it (`prompt_tokens`: the
emulator's rule, or a model's own tokenizer files from `tokenizer: /path`) and hashed
block by block exactly as vLLM hashes it (`block_hashing`, seeded with `hash_seed`, the
pods' `PYTHONHASHSEED`). `KVBlockIndex` says how many leading blocks each pod really
holds. Score (as upstream's prefix scorer) = leading blocks held / blocks of the prompt.

For a pod whose events are stale or absent (`KVBlockIndex.fresh`), the approximate
index's match is used instead and counted (`KVBlockIndex.fallbacks`, exported as
`igw_kv_events_fallback_total`). The matches land on `request.prefix_matches`, which
the predicted-TTFT scorer and the scheduler's pending-prefill count read: they see the
pod's real cached length, not where earlier prompts were sent.

`prepare` runs once per scheduling cycle, before any scorer (the scheduler calls it), so
the order of scorers in a profile does not matter.
"""

from __future__ import annotations

from collections.abc import Callable

from ..block_hashing import block_hashes, none_hash, to_external
from ..kv_index import KVBlockIndex
from ..prompt_tokens import EmulatorTokenizer, HFTokenizer, PromptTokenizer
from ..types import Endpoint, LLMRequest
from .base import Params
from .prefix import PrefixIndex

TYPE = "precise-prefix-cache-scorer"
EMULATOR = "emulator"

__all__ = ["TYPE", "PrecisePrefixParams", "PrecisePrefixScorer", "build"]


class PrecisePrefixParams(Params):
    block_size: int = 16  # the pods' --block-size
    hash_seed: str = "0"  # the pods' PYTHONHASHSEED (vLLM's NONE_HASH seed)
    tokenizer: str = EMULATOR  # "emulator", or a local directory with tokenizer.json
    stale_after_s: float = 2.0  # no event this long after sending new blocks: fall back
    events_port: int = 5557  # where pods publish (--kv-events-config endpoint port)
    events_label: str = "igw.dev/kv-events"  # a pod label with its full endpoint wins


def make_tokenizer(spec: str) -> PromptTokenizer:
    return EmulatorTokenizer() if spec == EMULATOR else HFTokenizer(spec)


class PrecisePrefixScorer:
    def __init__(
        self,
        name: str,
        params: PrecisePrefixParams,
        kv_index: KVBlockIndex,
        approximate: PrefixIndex | None,
        tokenizer: PromptTokenizer,
    ) -> None:
        self.name = name
        self.params = params
        self.kv_index = kv_index
        self.approximate = approximate
        self.tokenizer = tokenizer
        self._root = none_hash(params.hash_seed)
        kv_index.stale_after_s = params.stale_after_s

    def request_hashes(self, request: LLMRequest) -> list[int]:
        """The engine's block hashes of the prompt (cached on the request)."""
        if request.kv_hashes is not None:
            return list(request.kv_hashes)
        ids = self.tokenizer.prompt_ids(request.prompt_body) if request.prompt_body else None
        out: list[int] = []
        if ids:
            extra = (request.adapter,) if request.adapter else None
            size = self.params.block_size
            hashed = block_hashes(ids, self._root, block_size=size, extra_keys=extra)
            out = [to_external(h) for h in hashed]
        request.kv_hashes = out
        return out

    def prepare(self, request: LLMRequest, endpoints: list[Endpoint]) -> None:
        """Set `request.prefix_matches` from the events (approximate for stale pods)."""
        hashes = self.request_hashes(request)
        precise = self.kv_index.matches(hashes) if hashes else {}
        fresh = self.kv_index.fresh
        approx: dict[str, int] | None = None
        matches: dict[str, int] = {}
        for e in endpoints:
            if fresh(e.name):
                found = precise.get(e.name, 0)
            else:
                if approx is None:
                    approx = (
                        self.approximate.matches(request.prefix_hashes)
                        if self.approximate is not None and request.prefix_hashes
                        else {}
                    )
                found = approx.get(e.name, 0)
                self.kv_index.fallbacks += 1
            if found:
                matches[e.name] = found
        request.prefix_matches = matches

    def score(self, request: LLMRequest, endpoints: list[Endpoint]) -> list[float]:
        if request.prefix_matches is None:
            self.prepare(request, endpoints)
        matches = request.prefix_matches or {}
        blocks = request.prompt_tokens // self.params.block_size
        total = max(len(request.kv_hashes or ()), blocks, 1)
        return [min(1.0, matches.get(e.name, 0) / total) for e in endpoints]

    def on_picked(self, request: LLMRequest, endpoint: Endpoint, now: float) -> None:
        held = (request.prefix_matches or {}).get(endpoint.name, 0)
        if request.kv_hashes and held < len(request.kv_hashes):
            self.kv_index.expect(endpoint.name)

    def on_first_token(
        self, request: LLMRequest, endpoint: Endpoint, ttft_s: float, now: float
    ) -> None:
        return None

    def on_finished(self, request: LLMRequest, endpoint: Endpoint, now: float) -> None:
        return None


def build(
    name: str,
    params: dict[str, object],
    *,
    kv_index: KVBlockIndex | None = None,
    index: PrefixIndex | None = None,
    tokenizer_factory: Callable[[str], PromptTokenizer] = make_tokenizer,
    **_: object,
) -> PrecisePrefixScorer:
    """Built by the scheduler with its shared indexes (alone, with fresh ones)."""
    config = PrecisePrefixParams.model_validate(params)
    tokenizer = tokenizer_factory(config.tokenizer)
    return PrecisePrefixScorer(name, config, kv_index or KVBlockIndex(), index, tokenizer)
