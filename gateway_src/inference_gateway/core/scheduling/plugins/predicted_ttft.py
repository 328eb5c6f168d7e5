"""`predicted-ttft-scorer` (ours): prefer the pod that will produce the first token soonest.

Per pod, predicted TTFT = `seconds_per_token × (backlog + own uncached tokens)`:

* backlog: prompt tokens this picker sent to the pod that have not produced a first token
  yet (known exactly), or, when the pod's scraped queue says more is waiting (traffic
  from other replicas), `waiting × mean prompt tokens`; with a shared dispatch view the
  other replicas' pending prefill tokens and sent requests are added to each
  (`Endpoint.peer_prefill_tokens`, `Endpoint.peer_requests`);
* own uncached tokens: the prompt minus the blocks the prefix index says the pod holds;
* seconds_per_token: learned online per GPU class (the pods sharing one `igw.dev/gpu`
  label learn one figure; the pods of one pool without the label learn one figure too)
  from observed TTFTs, as
  a decayed ratio of sums Σ ttft / Σ tokens-ahead-at-dispatch. It starts from a prior:
  the seconds per token of the GPU class in `gpu_seconds_per_token` (default: the table
  routing ships, `core/scheduling/gpu_priors.py`), else the fleet average.

Under KV pressure a pick's uncached tokens cost more than its own prefill: storing them
evicts as many cached tokens from the pod, and some of those will be asked for again and
recomputed. The pods' KV events measure how often that happens: `KVBlockIndex.
recompute_share`, the share of the tokens picks compute that the fleet had cached and
evicted. Own uncached tokens are therefore priced at `1 + eviction_cost × share` tokens
each: a request goes back to the pod that holds its context unless the queue there
outweighs the rebuild *and* the evictions it causes elsewhere, while a fleet that
evicts nothing it needs again (share 0: every headline scenario, and any pool without
KV events) is scored exactly as before. A request cached nowhere pays the same price on
every pod, so only the choice between a pod that holds a prefix and one that does not
changes. `eviction_cost` 0.5 (an evicted token is worth half a recomputed one), from the
`kv-pressure` scenario over six seeds (mean TTFT, docs/benchmarks.md): 0 gave P50 0.355 s,
0.5 gave 0.339 s with P99 up 0.9 %, 1 gave 0.333 s with P99 up 14 % (hits queueing
behind rebuilds on their own pod).

So a half-loaded A10G is never mistaken for a half-loaded H100: equal queues, different
measured speeds. Score = best prediction / this pod's prediction, in (0, 1].

Why per class, not per pod (issue 24, measured in the `multi-turn-chat` scenario): the
ratio is load-dependent (chunked prefill runs queued prompts in the same steps, so a busy
pod's TTFT grows less than its tokens ahead), so a per-pod figure fell as its pod filled,
from the H100 prior of 3.6e-5 s to 0.7e-5 s on the first H100 picked, while the idle
H100s kept the prior and, picked no more, never learned otherwise: two of eight pods
served every session, 30 running requests on one. Identical GPUs share the measurement,
so load, not a luckier estimate, decides between them. Pods without the label herded the
same way when each learned alone (`igw serve --endpoints` over three unlabelled emulated
H100s: 27 of 27 streams on the first pod picked, so one pod's loss broke every stream);
a pool is most often one Deployment on one kind of GPU, so its unlabelled pods share one
figure, and a pool that mixes GPUs labels them (the shipped render does).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pydantic import Field, PositiveFloat

from inference_gateway.core.scheduling.kv_index import KVBlockIndex
from inference_gateway.core.scheduling.plugins.base import Params
from inference_gateway.core.scheduling.plugins.prefix import PrefixIndex, request_matches
from inference_gateway.core.scheduling.types import Endpoint, LLMRequest, PluginContext

TYPE = "predicted-ttft-scorer"
GPU_LABEL = "igw.dev/gpu"
TOKENS_PER_BLOCK = 16


class PredictedTTFTParams(Params):
    decay: float = 0.98  # weight of history per observation
    prior_weight: float = 4.0  # observations' worth of the prior
    default_seconds_per_token: float = 1e-4
    base_latency_s: float = 0.005
    # an evicted cached token's worth in recomputed tokens (see the module docstring)
    eviction_cost: float = Field(default=0.5, ge=0)
    # GPU class → seconds per prefill token; None: the shipped table (or the scheduler's)
    gpu_seconds_per_token: dict[str, PositiveFloat] | None = None


@dataclass(slots=True)
class _Speed:
    """Decayed Σ TTFT and Σ tokens ahead at dispatch, shared by the pods of one GPU class."""

    sum_ttft: float
    sum_tokens: float


@dataclass(slots=True)
class _PodModel:
    speed: _Speed
    backlog: int = 0  # tokens sent, first token not yet seen

    @property
    def seconds_per_token(self) -> float:
        return self.speed.sum_ttft / self.speed.sum_tokens


class PredictedTTFTScorer:
    def __init__(
        self,
        name: str,
        params: PredictedTTFTParams,
        index: PrefixIndex | None,
        priors: Mapping[str, float] | None = None,
        kv_index: KVBlockIndex | None = None,
    ) -> None:
        self.name = name
        self.params = params
        self.index = index
        self.kv_index = kv_index  # the pods' KV events: what evictions cost now
        self.priors = priors or {}  # GPU name → seconds per prefill token
        self._pods: dict[str, _PodModel] = {}
        self._speeds: dict[str, _Speed] = {}  # GPU class → its pods' shared speed
        self._pending: dict[str, tuple[str, float, int]] = {}  # request → pod, x, tokens
        self._mean_prompt = 1000.0

    def _model(self, endpoint: Endpoint) -> _PodModel:
        model = self._pods.get(endpoint.name)
        if model is None:
            gpu = endpoint.labels.get(GPU_LABEL, "")
            speed_class = gpu or f"unlabelled pods of pool {endpoint.pool!r}"
            speed = self._speeds.get(speed_class)
            if speed is not None:
                model = self._pods[endpoint.name] = _PodModel(speed)
                return model
            prior = self.priors.get(gpu) if gpu else None
            if prior is None:
                known = [m.seconds_per_token for m in self._pods.values()]
                prior = (
                    (sum(known) / len(known)) if known else (self.params.default_seconds_per_token)
                )
            weight = self.params.prior_weight * self._mean_prompt
            speed = _Speed(prior * weight, weight)
            self._speeds[speed_class] = speed
            model = self._pods[endpoint.name] = _PodModel(speed)
        return model

    def _tokens_ahead(self, endpoint: Endpoint, model: _PodModel) -> float:
        waiting = endpoint.metrics.waiting if endpoint.metrics else 0
        return max(
            model.backlog + endpoint.peer_prefill_tokens,
            (waiting + endpoint.sent_requests + endpoint.peer_requests) * self._mean_prompt,
        )

    def _uncached(self, request: LLMRequest, endpoint: Endpoint) -> int:
        if self.index is None or not request.prefix_hashes:
            return request.prompt_tokens
        hit = request_matches(self.index, request).get(endpoint.name, 0) * TOKENS_PER_BLOCK
        return max(1, request.prompt_tokens - hit)

    def own_token_price(self) -> float:
        """Tokens each own uncached token counts for: 1, plus the evictions it causes."""
        kv = self.kv_index
        share = kv.recompute_share if kv is not None else 0.0
        return 1.0 + self.params.eviction_cost * share

    def predict(self, request: LLMRequest, endpoint: Endpoint) -> float:
        """The score's prediction for one pod (its cost of evictions included)."""
        model = self._model(endpoint)
        own = self._uncached(request, endpoint) * self.own_token_price()
        x = self._tokens_ahead(endpoint, model) + own
        return self.params.base_latency_s + model.seconds_per_token * x

    def score(self, request: LLMRequest, endpoints: list[Endpoint]) -> list[float]:
        # `predict` inlined: this loop runs once per endpoint per request
        get, mean = self._pods.get, self._mean_prompt
        prompt, base = request.prompt_tokens, self.params.base_latency_s
        matches = (
            request_matches(self.index, request)
            if self.index is not None and request.prefix_hashes
            else None
        )
        predictions: list[float] = []
        price = self.own_token_price()
        for e in endpoints:
            model = get(e.name) or self._model(e)
            waiting = e.metrics.waiting if e.metrics else 0
            ahead = (waiting + e.sent_requests + e.peer_requests) * mean
            backlog = model.backlog + e.peer_prefill_tokens
            if backlog > ahead:
                ahead = backlog
            own = prompt
            if matches:
                own = prompt - matches.get(e.name, 0) * TOKENS_PER_BLOCK
                if own < 1:
                    own = 1
            speed = model.speed
            predictions.append(base + speed.sum_ttft / speed.sum_tokens * (ahead + own * price))
        if not predictions:
            return []
        if request.explanation is not None:
            request.explanation.predicted_ttft_s[self.name] = predictions
        best = min(predictions)
        return [best / p for p in predictions]

    def on_picked(self, request: LLMRequest, endpoint: Endpoint, now: float) -> None:
        model = self._model(endpoint)
        own = self._uncached(request, endpoint)
        x = self._tokens_ahead(endpoint, model) + own
        model.backlog += own
        self._pending[request.request_id] = (endpoint.name, x, own)
        self._mean_prompt += 0.01 * (request.prompt_tokens - self._mean_prompt)

    def on_first_token(
        self, request: LLMRequest, endpoint: Endpoint, ttft_s: float, now: float
    ) -> None:
        pending = self._pending.pop(request.request_id, None)
        if pending is None:
            return
        _, x, own = pending
        model = self._model(endpoint)
        model.backlog = max(0, model.backlog - own)
        decay = self.params.decay
        observed = max(0.0, ttft_s - self.params.base_latency_s)
        speed = model.speed
        speed.sum_ttft = speed.sum_ttft * decay + observed
        speed.sum_tokens = speed.sum_tokens * decay + x

    def on_finished(self, request: LLMRequest, endpoint: Endpoint, now: float) -> None:
        pending = self._pending.pop(request.request_id, None)
        if pending is not None:
            model = self._model(endpoint)
            model.backlog = max(0, model.backlog - pending[2])


def build(name: str, params: PredictedTTFTParams, context: PluginContext) -> PredictedTTFTScorer:
    priors = context.priors
    if params.gpu_seconds_per_token is not None:
        priors = params.gpu_seconds_per_token
    return PredictedTTFTScorer(name, params, context.index, priors, context.kv_index)
