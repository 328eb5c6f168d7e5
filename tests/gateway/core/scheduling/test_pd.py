"""P/D scheduling in the picker: role filters, the prefix-based decider, the profile
handler, their config checks, and what a request holds through both legs.

Upstream shapes: llm-d-inference-scheduler `pkg/plugins/filter/pd_role.go` (label
`llm-d.ai/role`; the decode filter keeps unlabeled pods, the prefill filter does not),
`pkg/plugins/profile/pd_profile_handler.go` (the decode profile runs first; the prefill
profile only when the decider says so) and `prefix_based_pd_decider.go`
(`nonCachedTokens`; 0 means always split).
"""

from __future__ import annotations

from typing import Any

import pytest

from inference_gateway.config.spec import FlowControlSpec, GatewayConfigSpec, SaturationSpec
from inference_gateway.core.request.body import OutputBound
from inference_gateway.core.request.contracts import RoutingState
from inference_gateway.core.request.director import Director, Intake
from inference_gateway.core.scheduling import Endpoint, LLMRequest, PodMetrics, Scheduler
from inference_gateway.core.scheduling.config_checks import parse_config
from inference_gateway.core.scheduling.pd import ROLE_LABEL
from inference_gateway.core.scheduling.plugins.prefix import prompt_block_hashes
from inference_gateway.errors import ConfigError

MODEL = "m"


def pd_config(non_cached_tokens: int = 512, **extra: Any) -> dict[str, Any]:
    return {
        "pools": [{"name": "pool", "selector": {"matchLabels": {"app": "vllm"}}}],
        "models": [{"name": MODEL, "pool": "pool", "profile": "decode"}],
        "plugins": [
            {"type": "prefill-filter"},
            {"type": "decode-filter"},
            {
                "type": "prefix-based-pd-decider",
                "parameters": {"nonCachedTokens": non_cached_tokens},
            },
            {"type": "pd-profile-handler"},
        ],
        "schedulingProfiles": [
            {
                "name": "decode",
                "plugins": [
                    {"pluginRef": "decode-filter"},
                    {"pluginRef": "prefix-cache-scorer", "weight": 2},
                    {"pluginRef": "queue-scorer", "weight": 1},
                ],
            },
            {
                "name": "prefill",
                "plugins": [
                    {"pluginRef": "prefill-filter"},
                    {"pluginRef": "queue-scorer", "weight": 1},
                ],
            },
        ],
        **extra,
    }


def pod(name: str, role: str | None, waiting: int = 0, port: int | None = None) -> Endpoint:
    labels = {} if role is None else {ROLE_LABEL: role}
    return Endpoint(
        name,
        "10.0.0.1",
        8000 + len(name) if port is None else port,
        pool="pool",
        labels=labels,
        metrics=PodMetrics(waiting=waiting),
        stale=False,
        models=frozenset({MODEL}),
    )


def request(tokens: int, text: str = "", request_id: str = "r") -> LLMRequest:
    return LLMRequest(
        request_id,
        MODEL,
        prompt_tokens=tokens,
        prefix_hashes=prompt_block_hashes(MODEL, text) if text else (),
        profile="decode",
    )


FLEET = [pod("p0", "prefill"), pod("p1", "prefill", waiting=3), pod("d0", "decode")]


def test_role_filters_follow_llm_d() -> None:
    """Decode keeps decode / both / prefill-decode and unlabeled pods; prefill keeps
    prefill / both / prefill-decode and never an unlabeled pod."""
    scheduler = Scheduler(parse_config(pd_config()))
    pods = [pod(n, r) for n, r in [("a", "prefill"), ("b", "decode"), ("c", "both")]]
    pods += [pod("d", "prefill-decode"), pod("e", None), pod("f", "encode")]
    decode = scheduler.profiles["decode"].filters[0].filter(request(10), pods)
    prefill = scheduler.profiles["prefill"].filters[0].filter(request(10), pods)
    assert [e.name for e in decode] == ["b", "c", "d", "e"]
    assert [e.name for e in prefill] == ["a", "c", "d"]


def test_a_long_prompt_gets_the_best_prefill_pod_and_decodes_on_a_decode_pod() -> None:
    scheduler = Scheduler(parse_config(pd_config()))
    req = request(4000)
    ranked = scheduler.schedule(req, FLEET)
    assert [e.name for e in ranked] == ["d0"]
    prefill = scheduler.schedule_prefill(req, FLEET, ranked[0])
    assert [e.name for e in prefill] == ["p0", "p1"]  # p1 has a queue
    assert req.prefill_pod == "p0" and req.remote_prefill


def test_below_the_threshold_the_request_stays_aggregated() -> None:
    scheduler = Scheduler(parse_config(pd_config(512)))
    req = request(511)
    decode = scheduler.schedule(req, FLEET)[0]
    assert scheduler.schedule_prefill(req, FLEET, decode) == []
    assert not req.remote_prefill


def test_a_prompt_the_decode_pod_mostly_caches_stays_aggregated() -> None:
    """The decider counts only the tokens the decode pod does not hold: 40 blocks of a
    41-block prompt cached leave 16 tokens to prefill, below 512."""
    scheduler = Scheduler(parse_config(pd_config(512)))
    text = "x" * 64 * 41
    first = request(656, text, "first")
    decode = scheduler.schedule(first, FLEET)[0]
    assert scheduler.schedule_prefill(first, FLEET, decode)  # nothing cached yet
    scheduler.on_picked(first, decode, 0.0)  # the index records the prompt on d0
    again = request(656, text, "again")
    assert scheduler.schedule(again, FLEET)[0] is decode
    assert scheduler.schedule_prefill(again, FLEET, decode) == []


def test_zero_non_cached_tokens_always_splits_and_no_prefill_pod_means_aggregated() -> None:
    scheduler = Scheduler(parse_config(pd_config(0)))
    req = request(1)
    decode = scheduler.schedule(req, FLEET)[0]
    assert scheduler.schedule_prefill(req, FLEET, decode)
    only_decode = [pod("d0", "decode"), pod("agg", None)]
    req = request(5000)
    decode = scheduler.schedule(req, only_decode)[0]
    assert scheduler.schedule_prefill(req, only_decode, decode) == []


def test_a_profile_without_a_handler_never_splits() -> None:
    scheduler = Scheduler(parse_config(pd_config(0)))
    req = request(5000)
    req.profile = "latency"
    decode = scheduler.schedule(req, FLEET)[0]
    assert scheduler.schedule_prefill(req, FLEET, decode) is None  # not even decode-only


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda c: c["plugins"][3].update(parameters={"prefillProfile": "nope"}),
            r"prefillProfile: unknown profile 'nope'",
        ),
        (
            lambda c: c["plugins"][3].update(parameters={"deciderPluginName": "queue-scorer"}),
            r"deciderPluginName: 'queue-scorer' is not a declared decider",
        ),
        (
            lambda c: c["plugins"][3].update(parameters={"prefillProfile": "decode"}),
            r"the same profile as decodeProfile",
        ),
        (
            lambda c: c["schedulingProfiles"][0]["plugins"].append(
                {"pluginRef": "pd-profile-handler"}
            ),
            r"is a profile-handler, which the scheduler runs between profiles",
        ),
        (
            lambda c: c["plugins"].append({"type": "pd-profile-handler", "name": "second"}),
            r"'decode' already has the handler 'pd-profile-handler'",
        ),
        (
            lambda c: c["plugins"][2].update(parameters={"nonCachedTokens": -1}),
            r"nonCachedTokens",
        ),
        (
            lambda c: c["plugins"][3].update(parameters={"aggregatedProfile": "nope"}),
            r"aggregatedProfile: unknown profile 'nope'",
        ),
    ],
)
def test_config_errors_name_the_field(change: Any, message: str) -> None:
    config = pd_config()
    change(config)
    with pytest.raises(ConfigError, match=message):
        parse_config(config)


OPEN = FlowControlSpec(  # admission out of the way
    saturation=SaturationSpec(
        queue_threshold=1e6,
        noncritical_queue_threshold=1e6,
        prefill_threshold_s=None,
        noncritical_prefill_threshold_s=None,
        critical_reserve_s=None,
    )
)


def director() -> tuple[Director, list[Endpoint]]:
    pods = [pod("p0", "prefill"), pod("d0", "decode")]
    config = GatewayConfigSpec.model_validate({**pd_config(), "flowControl": OPEN})
    return Director(lambda: pods, Scheduler(config), RoutingState.build(config)), pods


def intake(tokens: int) -> Intake:
    return Intake(MODEL, tokens, OutputBound(16, False), lambda model: ())


async def test_both_legs_are_held_and_released_exactly_once() -> None:
    """The prefill pod counts the prompt as pending prefill and the decode pod one token
    while the prefill leg runs; both end with nothing held."""
    d, (prefill_pod, decode_pod) = director()
    pending = d.begin(intake(3000), {})
    assert d.offer(pending)
    life = d.start(pending)
    assert life.decision.prefill == [prefill_pod]
    assert life.decision.ranked[0] is decode_pod
    life.prefill_picked(prefill_pod)
    assert (prefill_pod.inflight, prefill_pod.prefill_tokens) == (1, 3000)
    life.prefill_ended(0.4)
    assert (prefill_pod.inflight, prefill_pod.prefill_tokens) == (0, 0)
    assert prefill_pod.prefill_s_per_token > 0  # its leg's TTFT is its prefill speed
    life.picked(decode_pod)
    assert (decode_pod.inflight, decode_pod.prefill_tokens) == (1, 1)
    life.first_byte()
    assert decode_pod.prefill_s_per_token == 0  # waited on another pod: not learned
    life.finished()
    assert (decode_pod.inflight, decode_pod.prefill_tokens, d.active) == (0, 0, 0)
    short = d.begin(intake(100), {})
    assert d.offer(short)
    assert d.start(short).decision.prefill == []
    registry = d.metrics.registry
    for decision, count in (("prefill-decode", 1), ("decode-only", 1)):
        labels = {"model_name": MODEL, "decision_type": decision}
        assert registry.get_sample_value("llm_d_epp_disagg_decision_total", labels) == count


async def test_a_failed_prefill_leg_makes_the_decode_pod_prefill_and_an_open_leg_ends_with_it() -> (
    None
):
    d, (prefill_pod, decode_pod) = director()
    pending = d.begin(intake(3000), {})
    assert d.offer(pending)
    life = d.start(pending)
    life.prefill_picked(prefill_pod)
    life.prefill_ended(None)
    assert prefill_pod.inflight == 0 and not life.decision.llm.remote_prefill
    life.picked(decode_pod)
    assert decode_pod.prefill_tokens == 3000  # aggregated after all
    life.finished()

    pending = d.begin(intake(3000), {})
    assert d.offer(pending)
    life = d.start(pending)
    life.prefill_picked(prefill_pod)  # the Envoy path: a sidecar runs the leg unseen
    life.picked(decode_pod)
    life.cancelled("client_cancelled")
    assert (prefill_pod.inflight, prefill_pod.prefill_tokens) == (0, 0)
    assert (decode_pod.inflight, decode_pod.prefill_tokens) == (0, 0)


async def test_a_whole_request_is_ranked_over_both_roles_by_the_aggregated_profile() -> None:
    """With `aggregatedProfile`, a decode-only request is ranked over every pod (here the
    idle prefill pod beats the busy decode pod on queue); without it, llm-d's rule keeps
    it on the decode profile's pod."""
    busy_decode = [pod("p0", "prefill"), pod("d0", "decode", waiting=6)]
    for aggregated, first in ((None, "d0"), ("throughput", "p0")):
        config = pd_config(512)
        if aggregated is not None:
            config["plugins"][3]["parameters"] = {"aggregatedProfile": aggregated}
        spec = GatewayConfigSpec.model_validate({**config, "flowControl": OPEN})
        d = Director(lambda: busy_decode, Scheduler(spec), RoutingState.build(spec))
        pending = d.begin(intake(100), {})
        assert d.offer(pending)
        life = d.start(pending)
        assert life.decision.prefill == []
        assert life.decision.ranked[0].name == first, aggregated
        life.finished()


async def test_a_broken_decode_legs_continuation_is_whole_on_another_decode_pod() -> None:
    """A decode pod's stream broke after it started: the continuation carries no
    `kv_transfer_params` (resume.py), so it is ranked over the decode pods left (never
    a prefill pod: they hold no decode role) and the pod it goes to counts the whole
    prompt as its own prefill, not the one token of a decode leg."""
    pods = [pod("p0", "prefill", port=1), pod("d0", "decode", port=2)]
    pods.append(pod("d1", "decode", waiting=2, port=3))
    config = GatewayConfigSpec.model_validate({**pd_config(0), "flowControl": OPEN})
    d = Director(lambda: pods, Scheduler(config), RoutingState.build(config))
    pending = d.begin(intake(3000), {})
    assert d.offer(pending)
    life = d.start(pending)
    p0, d0, d1 = pods
    assert life.decision.prefill[0] is p0 and life.decision.ranked[0] is d0
    life.prefill_picked(p0)
    life.prefill_ended(0.4)
    life.picked(d0)
    assert d0.prefill_tokens == 1  # a decode leg
    life.first_byte()
    life.broke(error_event=False)
    assert (d0.inflight, life.decision.llm.remote_prefill) == (0, False)
    ranked = d.rerank(life.decision, {d0.hostport})
    assert ranked == [d1]
    life.picked(d1)
    assert (d1.inflight, d1.prefill_tokens) == (1, 3000)
    life.finished()
    assert (d1.inflight, d1.prefill_tokens) == (0, 0)
    assert d.rerank(life.decision, {d0.hostport, d1.hostport}) == []  # no decode pod left


async def test_with_an_aggregated_profile_a_continuation_may_go_to_a_prefill_pod() -> None:
    """With the handler's `aggregatedProfile`, a continuation is ranked as any whole
    request is, over pods of either role: the last decode pod lost, it resumes on the
    prefill pod (a kv_both engine serves whole requests)."""
    pods = [pod("p0", "prefill", port=1), pod("d0", "decode", port=2)]
    config = pd_config(0)
    config["plugins"][3]["parameters"] = {"aggregatedProfile": "prefill"}
    spec = GatewayConfigSpec.model_validate({**config, "flowControl": OPEN})
    d = Director(lambda: pods, Scheduler(spec), RoutingState.build(spec))
    pending = d.begin(intake(3000), {})
    assert d.offer(pending)
    life = d.start(pending)
    assert life.decision.prefill == [pods[0]] and life.decision.ranked[0] is pods[1]
    life.picked(pods[1])
    life.broke(error_event=True)
    assert d.rerank(life.decision, {pods[1].hostport}) == [pods[0]]
    life.finished()
