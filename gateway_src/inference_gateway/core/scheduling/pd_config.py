"""The picker config of a P/D pool: its decider, its profile handler and its two
profiles, one definition for everything that builds one (the charts' rendered picker
config, the simulator's `gateway-pd` policy), so what the simulator measures is what a
cluster runs.

Decode pods hold every running stream's KV cache for the whole answer, and a decode
step reads all of it: time per output token grows with the pod's running batch and its
KV use. So decode ranks by KV-cache headroom and running requests (the TPOT terms),
and by prefix affinity (a decode pod that already holds the prompt needs no prefill
leg at all). Prefill pods hold a request for its prompt only and are compute-bound, so
prefill ranks by predicted TTFT and queue, with prefix affinity for the compute it
saves. (llm-d guides/pd-disaggregation `gaie-pd/values.yaml` ranks both by queue-scorer
alone; the shape of the handler and decider is llm-d-inference-scheduler's
`pkg/plugins/profile/pd_profile_handler.go` and `prefix_based_pd_decider.go`.)
"""

from __future__ import annotations

from dataclasses import dataclass

from inference_gateway.config.spec import PluginRef, PluginSpec, SchedulingProfileSpec
from inference_gateway.core.scheduling.pd import (
    DECIDER_TYPE,
    DECODE_FILTER_TYPE,
    HANDLER_TYPE,
    PREFILL_FILTER_TYPE,
)

__all__ = ["PDNames", "pd_names", "pd_plugins", "pd_profiles", "role_filters"]


@dataclass(frozen=True, slots=True)
class PDNames:
    """The profile and plugin instance names of one P/D pool."""

    decode_profile: str
    prefill_profile: str
    decider: str
    handler: str


def pd_names(pool: str | None = None) -> PDNames:
    """Per pool, so two P/D pools with their own thresholds never share a decider; the
    upstream defaults (`decode`, `prefill`, the plugin types) for a config of one pool."""
    if pool is None:
        return PDNames("decode", "prefill", DECIDER_TYPE, HANDLER_TYPE)
    return PDNames(
        f"{pool}-decode", f"{pool}-prefill", f"{pool}-pd-decider", f"{pool}-pd-profile-handler"
    )


def role_filters() -> list[PluginSpec]:
    """The two role filters, declared once however many P/D pools there are."""
    return [PluginSpec(type=PREFILL_FILTER_TYPE), PluginSpec(type=DECODE_FILTER_TYPE)]


def pd_plugins(names: PDNames, non_cached_tokens: int, aggregated_profile: str) -> list[PluginSpec]:
    """A pool's decider (its `nonCachedTokens`) and the handler that names its profiles;
    a request kept whole goes to the best pod of either role by `aggregated_profile` (the
    config's default profile), so short prompts use the prefill pods' GPUs too."""
    return [
        PluginSpec(
            type=DECIDER_TYPE,
            name=names.decider,
            parameters={"nonCachedTokens": non_cached_tokens},
        ),
        PluginSpec(
            type=HANDLER_TYPE,
            name=names.handler,
            parameters={
                "decodeProfile": names.decode_profile,
                "prefillProfile": names.prefill_profile,
                "deciderPluginName": names.decider,
                "aggregatedProfile": aggregated_profile,
            },
        ),
    ]


def pd_profiles(names: PDNames) -> list[SchedulingProfileSpec]:
    """The decode and prefill profiles (the module docstring says why these scorers)."""

    def ref(plugin: str, weight: float | None = None) -> PluginRef:
        return PluginRef(plugin_ref=plugin, weight=weight)

    return [
        SchedulingProfileSpec(
            name=names.decode_profile,
            plugins=[
                ref(DECODE_FILTER_TYPE),
                ref("kv-cache-utilization-scorer", 2),
                ref("running-requests-size-scorer", 1),
                ref("precise-prefix-cache-scorer", 1),
                ref("max-score-picker"),
            ],
        ),
        SchedulingProfileSpec(
            name=names.prefill_profile,
            plugins=[
                ref(PREFILL_FILTER_TYPE),
                ref("predicted-ttft-scorer", 2),
                ref("queue-scorer", 1),
                ref("precise-prefix-cache-scorer", 1),
                ref("max-score-picker"),
            ],
        ),
    ]
