"""The scheduler: builds the profiles of a `GatewayConfigSpec` and runs one per request.

It owns what plugins share across requests: the approximate prefix index (updated after
every pick) and the picker's own bookkeeping on each endpoint (sent since the last
scrape, in flight). Data planes call `schedule`, then report outcomes through
`on_picked`, `on_first_token` and `on_finished`, so learning plugins see every result.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from inference_gateway.core.scheduling.explain import Explanation
from inference_gateway.core.scheduling.filters import eligible, explain_ineligible
from inference_gateway.core.scheduling.gpu_priors import gpu_priors
from inference_gateway.core.scheduling.kv_index import KVBlockIndex
from inference_gateway.core.scheduling.pd import PDProfileHandler, PrefixBasedPDDecider
from inference_gateway.core.scheduling.plugins.max_score import MaxScorePicker
from inference_gateway.core.scheduling.plugins.precise_prefix import PrecisePrefixScorer
from inference_gateway.core.scheduling.plugins.prefix import PrefixIndex
from inference_gateway.core.scheduling.profile import PluginTimer, SchedulingProfile
from inference_gateway.core.scheduling.registry import PLUGIN_TYPES, Plugin, build_plugin
from inference_gateway.core.scheduling.types import (
    Endpoint,
    Filter,
    LLMRequest,
    Picker,
    PluginContext,
    SchedulingObserver,
    Scorer,
)
from inference_gateway.errors import ConfigError, NoEndpointError

if TYPE_CHECKING:  # the config imports the registry: no import cycle at run time
    from inference_gateway.config.spec import GatewayConfigSpec, PluginRef

__all__ = ["Scheduler"]

PREFILL_SPEED_DECAY = 0.98  # weight of history per TTFT observed
BLOCK_TOKENS = 16  # tokens per prefix-index block (64 characters)


class Scheduler:
    def __init__(
        self,
        config: GatewayConfigSpec,
        *,
        count_inflight: bool = True,
        seed: int | None = None,
        priors: dict[str, float] | None = None,
        timer: PluginTimer | None = None,
        kv_index: KVBlockIndex | None = None,
    ) -> None:
        self.config = config
        self.count_inflight = count_inflight
        self.index = PrefixIndex()
        # what each pod really caches, from its KV events (fed by the picker's subscriber
        # or the simulator); used only by a precise-prefix-cache-scorer
        self.kv_index = kv_index or KVBlockIndex()
        # (request, pod) → (scrape_seq at pick, prefill tokens ahead of it and its own, its own)
        self._sent: dict[tuple[str, str], tuple[int, int, int]] = {}
        self._speed: dict[str, tuple[float, float]] = {}  # pod → decayed Σ ttft, Σ tokens
        # the config was validated (`parse_config` built every plugin once), so
        # building them again cannot fail on their parameters
        context = PluginContext(
            index=self.index,
            seed=seed,
            count_inflight=count_inflight,
            priors=gpu_priors() if priors is None else priors,
            kv_index=self.kv_index,
        )
        self._types = {spec.instance_name: PLUGIN_TYPES[spec.type] for spec in config.plugins}
        plugins = {
            spec.instance_name: build_plugin(
                spec.type, spec.instance_name, spec.parameters, context
            )
            for spec in config.plugins
        }
        self.profiles = {
            p.name: self._build_profile(p.name, p.plugins, plugins, timer)
            for p in config.scheduling_profiles
        }
        used = {ref.plugin_ref for p in config.scheduling_profiles for ref in p.plugins}
        self._observers = [
            plugin
            for name, plugin in plugins.items()
            if name in used and isinstance(plugin, SchedulingObserver)
        ]
        # P/D: the handler of each decode profile, its decider bound (validated: it exists)
        self._handlers: dict[str, PDProfileHandler] = {}
        for plugin in plugins.values():
            if isinstance(plugin, PDProfileHandler):
                decider = plugins[plugin.decider_plugin_name]
                assert isinstance(decider, PrefixBasedPDDecider)
                plugin.decider = decider
                self._handlers[plugin.decode_profile] = plugin
        # a decider reads the prefix index, so P/D keeps it up to date too
        self.uses_prefix = bool(self._handlers) or any(
            self._types[name].uses_prefix_index for name in used
        )
        # per profile: the precise scorer that sets the cycle's prefix matches first
        self._precise = {
            p.name: next(
                (
                    plugin
                    for r in p.plugins
                    if isinstance(plugin := plugins[r.plugin_ref], PrecisePrefixScorer)
                ),
                None,
            )
            for p in config.scheduling_profiles
        }
        self.precise: PrecisePrefixScorer | None = next(
            (s for s in self._precise.values() if s is not None), None
        )

    def _build_profile(
        self,
        name: str,
        refs: list[PluginRef],
        plugins: dict[str, Plugin],
        timer: PluginTimer | None,
    ) -> SchedulingProfile:
        """A profile from its refs, each plugin placed by its registered kind."""
        filters: list[Filter] = []
        scorers: list[tuple[Scorer, float]] = []
        picker: Picker | None = None
        for ref in refs:
            plugin = plugins[ref.plugin_ref]
            kind = self._types[ref.plugin_ref].kind
            if kind == "picker":
                picker = cast(Picker, plugin)
            elif kind == "scorer":
                scorers.append((cast(Scorer, plugin), float(ref.weight or 0)))
            elif kind == "filter":
                filters.append(cast(Filter, plugin))
        return SchedulingProfile(name, scorers, picker or MaxScorePicker(), timer, filters)

    def profile_for(self, request: LLMRequest) -> SchedulingProfile:
        name = request.profile or self.config.default_profile
        profile = self.profiles.get(name)
        if profile is None:
            raise ConfigError("request", [f"profile: unknown scheduling profile {name!r}"])
        return profile

    def schedule(self, request: LLMRequest, endpoints: list[Endpoint]) -> list[Endpoint]:
        """Ranked candidates, best first; `NoEndpointError` when none is eligible."""
        candidates = eligible(request, endpoints)
        explanation = request.explanation
        if explanation is not None:
            explanation.considered = len(endpoints)
            if len(candidates) != len(endpoints):
                explain_ineligible(explanation, request, endpoints)
        if not candidates:
            raise NoEndpointError(f"no ready endpoint serves model {request.model!r}")
        profile = self.profile_for(request)
        precise = self._precise.get(profile.name)
        if precise is not None:
            precise.prepare(request, candidates)
        ranked = profile.run(request, candidates)
        if not ranked:
            raise NoEndpointError(f"no endpoint passed the filters of profile {profile.name!r}")
        return ranked

    def schedule_prefill(
        self, request: LLMRequest, endpoints: list[Endpoint], decode: Endpoint
    ) -> list[Endpoint] | None:
        """Ranked prefill pods for a request `schedule` sent to `decode`. None: its
        profile has no `pd-profile-handler`; [] (decode-only): the decider finds too
        little of the prompt uncached on `decode`, or no other pod passes the prefill
        profile. Either way it is served aggregated on `decode`. Sets
        `request.prefill_pod` to the best prefill pod."""
        handler = self._handlers.get(request.profile or self.config.default_profile)
        if handler is None:
            return None
        name = handler.prefill_profile_for(request, decode)
        if name is None:
            return []
        candidates = [e for e in eligible(request, endpoints) if e is not decode]
        if not candidates:
            return []
        precise = self._precise.get(name)
        if precise is not None:
            precise.prepare(request, candidates)
        decode_explanation = request.explanation
        if decode_explanation is not None:  # the prefill cycle explains itself apart
            request.explanation = Explanation(considered=len(candidates))
        try:
            ranked = self.profiles[name].run(request, candidates)
        finally:
            if decode_explanation is not None:
                decode_explanation.prefill = request.explanation
                request.explanation = decode_explanation
        request.prefill_pod = ranked[0].name if ranked else None
        return ranked

    def schedule_aggregated(
        self, request: LLMRequest, endpoints: list[Endpoint]
    ) -> list[Endpoint] | None:
        """For a request `schedule_prefill` kept whole: ranked pods of every role by the
        handler's `aggregatedProfile`; None keeps the decode profile's ranking (no such
        profile, or none of its pods eligible)."""
        handler = self._handlers.get(request.profile or self.config.default_profile)
        if handler is None or handler.aggregated_profile is None:
            return None
        candidates = eligible(request, endpoints)
        name = handler.aggregated_profile
        precise = self._precise.get(name)
        if precise is not None:
            precise.prepare(request, candidates)
        return self.profiles[name].run(request, candidates) or None

    def on_picked(self, request: LLMRequest, endpoint: Endpoint, now: float) -> None:
        endpoint.sent_requests += 1
        endpoint.sent_tokens += request.prompt_tokens
        endpoint.inflight += 1
        own = request.prompt_tokens  # minus what the prefix index says the pod holds
        if request.prefill_pod is not None and endpoint.name != request.prefill_pod:
            own = 1  # a decode leg: its prompt's KV arrives from the prefill pod
        elif request.prefix_matches:
            own = max(1, own - request.prefix_matches.get(endpoint.name, 0) * BLOCK_TOKENS)
        endpoint.prefill_tokens += own
        self._sent[(request.request_id, endpoint.name)] = (
            endpoint.scrape_seq,
            endpoint.prefill_tokens + endpoint.peer_prefill_tokens,  # other replicas' too
            own,
        )
        for observer in self._observers:
            observer.on_picked(request, endpoint, now)
        if self.uses_prefix and request.prefix_hashes:
            m = endpoint.metrics
            if m is not None and m.num_gpu_blocks:
                self.index.set_capacity(endpoint.name, m.num_gpu_blocks * m.block_size // 16)
            self.index.add(endpoint.name, request.prefix_hashes)

    def on_first_token(
        self, request: LLMRequest, endpoint: Endpoint, ttft_s: float, now: float
    ) -> None:
        tokens = self._started(request, endpoint)
        # a decode leg's first token waited for another pod's prefill: not this pod's speed
        decode_leg = request.prefill_pod is not None and endpoint.name != request.prefill_pod
        if tokens and not decode_leg:
            self._learn_prefill_speed(endpoint, ttft_s, tokens)
        for observer in self._observers:
            observer.on_first_token(request, endpoint, ttft_s, now)

    def _started(self, request: LLMRequest, endpoint: Endpoint) -> int:
        """A request that produced its first token (or ended) no longer waits at the pod:
        stop counting its uncached prompt tokens as pending prefill, and as sent-but-unseen unless a
        scrape already counted it. Returns the prefill tokens it was dispatched behind
        (its own included), 0 when it was not pending."""
        sent = self._sent.pop((request.request_id, endpoint.name), None)
        if sent is None:
            return 0
        seq, tokens, own = sent
        endpoint.prefill_tokens = max(0, endpoint.prefill_tokens - own)
        if seq == endpoint.scrape_seq:
            endpoint.sent_requests = max(0, endpoint.sent_requests - 1)
            endpoint.sent_tokens = max(0, endpoint.sent_tokens - request.prompt_tokens)
        return tokens

    def _learn_prefill_speed(self, endpoint: Endpoint, ttft_s: float, tokens: int) -> None:
        """Seconds per prefill token as a decayed ratio of sums, Σ ttft / Σ tokens ahead
        at dispatch (the TTFT predictor's estimator), kept on the endpoint."""
        ttft_sum, token_sum = self._speed.get(endpoint.name, (0.0, 0.0))
        ttft_sum = ttft_sum * PREFILL_SPEED_DECAY + ttft_s
        token_sum = token_sum * PREFILL_SPEED_DECAY + tokens
        self._speed[endpoint.name] = (ttft_sum, token_sum)
        endpoint.prefill_s_per_token = ttft_sum / token_sum

    def on_finished(self, request: LLMRequest, endpoint: Endpoint, now: float) -> None:
        endpoint.inflight = max(0, endpoint.inflight - 1)
        self._started(request, endpoint)
        for observer in self._observers:
            observer.on_finished(request, endpoint, now)
