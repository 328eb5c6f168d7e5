"""Prefill/decode disaggregation in the picker, in llm-d's shape.

A P/D pool labels its pods with their role (`llm-d.ai/role`: prefill, decode, or both).
A `pd-profile-handler` names two profiles: the scheduler runs the decode profile first
(its best pod is where the request is sent and streams from), then asks the handler's
decider whether this prompt is worth a separate prefill on the best decode pod; if so it
runs the prefill profile and the data plane sends the prefill leg to its best pod first.
A decider that says no (a short prompt, or one the decode pod mostly caches already) or
a prefill profile that leaves no pod serves the request aggregated: on the decode pod
(llm-d's rule), or, where the handler names an `aggregatedProfile` (ours), on the best
pod of the whole pool by that profile, so a fleet split for long prompts still serves
its short ones on every GPU it has, prefill pods included.

Upstream: llm-d-inference-scheduler `pkg/plugins/filter/pd_role.go` (the label, its
values, which filter keeps unlabeled pods), `pkg/plugins/profile/pd_profile_handler.go`
(`decodeProfile`, `prefillProfile`, `deciderPluginName`; decode runs first, prefill only
when the decider says so) and `pkg/plugins/profile/prefix_based_pd_decider.go`
(`nonCachedTokens`: the prompt's tokens not cached on the decode pod; 0 = always P/D).
"""

from __future__ import annotations

from pydantic import Field

from inference_gateway.core.scheduling.plugins.base import Params
from inference_gateway.core.scheduling.plugins.prefix import request_matches
from inference_gateway.core.scheduling.types import Endpoint, LLMRequest, PluginContext

__all__ = [
    "DECIDER_TYPE",
    "DECODE_FILTER_TYPE",
    "HANDLER_TYPE",
    "PREFILL_FILTER_TYPE",
    "ROLE_LABEL",
    "PDProfileHandler",
    "PrefixBasedPDDecider",
    "RoleFilter",
]

ROLE_LABEL = "llm-d.ai/role"
PREFILL_FILTER_TYPE = "prefill-filter"
DECODE_FILTER_TYPE = "decode-filter"
DECIDER_TYPE = "prefix-based-pd-decider"
HANDLER_TYPE = "pd-profile-handler"
#: tokens per block of the prefix index and of the engines' KV events
BLOCK_TOKENS = 16

# llm-d's role values: "both" is the deprecated spelling of "prefill-decode"
_PREFILL_ROLES = frozenset({"prefill", "prefill-decode", "both"})
_DECODE_ROLES = frozenset({"decode", "prefill-decode", "both"})


class RoleParams(Params):
    pass


class RoleFilter:
    """Keeps the pods whose role label is one of `roles`; unlabeled pods only when
    `unlabeled` (a decode filter keeps them: an aggregated pod decodes; a prefill filter
    does not, so a pool without roles never splits a request)."""

    def __init__(self, name: str, roles: frozenset[str], *, unlabeled: bool) -> None:
        self.name = name
        self.roles = roles
        self.unlabeled = unlabeled

    def filter(self, request: LLMRequest, endpoints: list[Endpoint]) -> list[Endpoint]:
        roles, unlabeled = self.roles, self.unlabeled
        out = []
        for endpoint in endpoints:
            role = endpoint.labels.get(ROLE_LABEL)
            if (unlabeled and role is None) or role in roles:
                out.append(endpoint)
        return out


def build_prefill_filter(name: str, params: RoleParams, context: PluginContext) -> RoleFilter:
    return RoleFilter(name, _PREFILL_ROLES, unlabeled=False)


def build_decode_filter(name: str, params: RoleParams, context: PluginContext) -> RoleFilter:
    return RoleFilter(name, _DECODE_ROLES, unlabeled=True)


class DeciderParams(Params):
    non_cached_tokens: int = Field(default=0, ge=0)


class PrefixBasedPDDecider:
    """Split a request when at least `non_cached_tokens` of its prompt are not cached on
    the decode pod (the prefix index's leading match, or the pods' own KV events when a
    precise scorer set this cycle's matches): below that, the decode pod prefills the
    short rest faster than a transfer would bring it."""

    def __init__(self, name: str, non_cached_tokens: int, context: PluginContext) -> None:
        self.name = name
        self.non_cached_tokens = non_cached_tokens
        self.index = context.index

    def decide(self, request: LLMRequest, decode: Endpoint) -> bool:
        threshold = self.non_cached_tokens
        if threshold <= 0:
            return True
        if request.prompt_tokens < threshold:
            return False
        cached = request_matches(self.index, request).get(decode.name, 0) * BLOCK_TOKENS
        return request.prompt_tokens - cached >= threshold


def build_decider(name: str, params: DeciderParams, context: PluginContext) -> PrefixBasedPDDecider:
    return PrefixBasedPDDecider(name, params.non_cached_tokens, context)


class HandlerParams(Params):
    decode_profile: str = Field(default="decode", min_length=1)
    prefill_profile: str = Field(default="prefill", min_length=1)
    decider_plugin_name: str = Field(default=DECIDER_TYPE, min_length=1)
    # ours: a decode-only request is ranked by this profile over every pod of the pool,
    # prefill pods too (a kv_both engine serves whole requests); unset: llm-d's rule,
    # it stays on the decode profile's pod
    aggregated_profile: str | None = Field(default=None, min_length=1)


class PDProfileHandler:
    """Which profile runs after a request's decode profile: the prefill profile when
    the decider (another plugin instance, bound by the scheduler) says so, else none."""

    def __init__(self, name: str, params: HandlerParams) -> None:
        self.name = name
        self.decode_profile = params.decode_profile
        self.prefill_profile = params.prefill_profile
        self.decider_plugin_name = params.decider_plugin_name
        self.aggregated_profile = params.aggregated_profile
        self.decider: PrefixBasedPDDecider | None = None  # bound by the scheduler

    def prefill_profile_for(self, request: LLMRequest, decode: Endpoint) -> str | None:
        decider = self.decider
        assert decider is not None, "the scheduler binds the decider before any request"
        return self.prefill_profile if decider.decide(request, decode) else None


def build_handler(name: str, params: HandlerParams, context: PluginContext) -> PDProfileHandler:
    return PDProfileHandler(name, params)
