"""Each peer router's documented decision rule, pinned on small hand-built states."""

from __future__ import annotations

from pathlib import Path

import pytest

from inference_gateway.errors import ConfigError
from inference_gateway.sim.peers import DynamoKV, ProductionStackPrefixAware, SGLangCacheAware
from inference_gateway.sim.pods import SimPod, build_fleet
from inference_gateway.sim.policies import POLICIES, make_policy
from inference_gateway.sim.replicas import Replicated, Sharing, parse_replicas
from inference_gateway.sim.runner import simulate
from inference_gateway.sim.scenario import PoolSpec, load_scenario
from inference_gateway.sim.workload import SimRequest, prefix_block_ids


class _Quiet:
    def on_first_token(self, request: object, time: float) -> None: ...
    def on_step(self, time: float) -> None: ...
    def on_finish(self, request: object, time: float) -> None: ...


def pods(n: int = 4) -> list[SimPod]:
    return build_fleet(
        [PoolSpec(name="h100", gpu="H100", model="llama-3.1-8b", replicas=n)], _Quiet()
    )


def req(i: int, prompt: int = 1000, group: int | None = None, prefix: int = 0) -> SimRequest:
    return SimRequest(
        t=0.0, prompt_tokens=prompt, output_tokens=10, prefix_group=group,
        prefix_tokens=prefix, request_id=i,
    )  # fmt: skip


def test_peers_registered_under_design_names() -> None:
    for name in ("production-stack-prefixaware", "sglang-cache-aware", "dynamo-kv"):
        assert name in POLICIES
        assert make_policy(name, pods(2), 0).name == name


# -- vLLM production-stack `prefixaware` ---------------------------------------------------


def test_prefixaware_falls_back_to_lowest_qps_and_prefers_unseen_pods() -> None:
    fleet = pods(3)
    router = ProductionStackPrefixAware("p", fleet, 0)
    # no prefix: an endpoint with no recorded request wins at once, in endpoint order
    assert [router.route(req(i), 0.0).index for i in range(3)] == [0, 1, 2]
    router.route(req(3), 1.0)  # pod 0 again (all equal): pod 0 now has 2 in the window
    assert router.route(req(4), 2.0).index == 1
    # arrivals older than the 60 s window stop counting
    assert router.qps(fleet[0], 60.5) == pytest.approx(1 / 60)


def test_prefixaware_pins_a_prefix_to_the_endpoints_that_first_saw_it() -> None:
    fleet = pods(4)
    router = ProductionStackPrefixAware("p", fleet, 0)
    first = router.route(req(0, 2000, group=5, prefix=1500), 0.0)
    # 1500 tokens = 6000 characters = 46 full 128-character chunks
    assert len(router.chunks(req(9, 2000, group=5, prefix=1500))) == 46
    for i in range(1, 50):  # however loaded, the match keeps winning
        assert router.route(req(i, 2000, group=5, prefix=1500), float(i)) is first
    # a matched set of several endpoints: a uniform choice among them only
    for chunk in router.chunks(req(0, 2000, group=6, prefix=1500)):
        router.holders[chunk] = {1, 3}
    picks = {router.route(req(100 + i, 2000, group=6, prefix=1500), 60.0).index for i in range(40)}
    assert picks == {1, 3}


# -- SGLang `cache_aware` -------------------------------------------------------------------


def hold(router: SGLangCacheAware, group: int, tokens: int, holders: set[int]) -> None:
    """The tree holds system prompt `group` (its `tokens`) for `holders`."""
    for block in prefix_block_ids(group, tokens):
        router.tenants[block] = set(holders)


def test_cache_aware_follows_the_tree_above_the_threshold_while_balanced() -> None:
    router = SGLangCacheAware("s", pods(4), 0)
    hold(router, 2, 1500, {3})
    router.load = [0, 0, 0, 30]  # 30 − 0 ≤ 32: balanced
    # match rate 1500 / 2000 = 0.75 > 0.5: the tree's worker, not the idle ones
    assert router.route(req(0, 2000, group=2, prefix=1500), 0.0).index == 3
    # match rate 400 / 1000 = 0.4 ≤ 0.5: least loaded instead (and now held there too)
    pod = router.route(req(1, 1000, group=2, prefix=400), 0.0)
    assert pod.index == 0 and router.tenants[prefix_block_ids(2, 400)[0]] == {0, 3}


def test_cache_aware_balances_when_both_thresholds_are_crossed() -> None:
    router = SGLangCacheAware("s", pods(3), 0)
    hold(router, 1, 1500, {0})
    router.load = [40, 7, 8]  # 40 − 7 = 33 > 32 and 40 > 1.1 × 7
    assert router.imbalanced()
    assert router.route(req(0, 2000, group=1, prefix=1500), 0.0).index == 1
    first = prefix_block_ids(1, 1500)[0]
    assert router.tenants[first] == {0, 1}  # the balancing pick is inserted into the tree
    hold(router, 1, 1500, {0})
    router.load = [40, 8, 9]  # 40 − 8 = 32: not above the absolute threshold
    assert not router.imbalanced()
    assert router.route(req(1, 2000, group=1, prefix=1500), 0.0).index == 0
    router.on_finished(req(1), router.pods[0], 1.0)
    assert router.load[0] == 40


# -- Dynamo KV router -----------------------------------------------------------------------


def test_dynamo_cost_is_weighted_prefill_blocks_plus_decode_blocks() -> None:
    fleet = pods(3)
    router = DynamoKV("d", fleet, 0)
    router.prefill_tokens = [320, 0, 0]  # 20 blocks waiting for prefill on pod 0
    router.unique_blocks = [0, 50, 10]  # active decode blocks
    request = req(0, 160)  # 10 blocks, nothing cached
    costs = [router.cost(p, request)[0] for p in fleet]
    assert costs == [1.0 * (20 + 10) + (0 + 10), 1.0 * 10 + (50 + 10), 1.0 * 10 + (10 + 10)]
    assert router.route(request, 0.0).index == 2  # the lowest cost: 20 < 40 < 60
    assert router.prefill_tokens[2] == 160 and router.unique_blocks[2] == 20
    router.on_first_token(request, fleet[2], 0.1, 0.1)
    assert router.prefill_tokens[2] == 0 and router.unique_blocks[2] == 20
    router.on_finished(request, fleet[2], 1.0)
    assert router.unique_blocks[2] == 10


def test_dynamo_counts_cached_blocks_from_the_engine_and_shares_active_prefixes() -> None:
    fleet = pods(2)
    router = DynamoKV("d", fleet, 0)
    ids = prefix_block_ids(4, 1600)  # 100 blocks
    fleet[1].engine.pool.acquire(ids, 0)  # pod 1 holds the system prompt (a KV event)
    request = req(0, 1760, group=4, prefix=1600)  # 110 blocks, 10 of them its own
    cost0, new0 = router.cost(fleet[0], request)
    cost1, new1 = router.cost(fleet[1], request)
    assert (new0, new1) == (1760, 160)
    assert (cost0, cost1) == (110 + 110, 10 + 110)
    assert router.route(request, 0.0) is fleet[1]
    # a second request of the same group adds only its own blocks to decode_blocks
    again = req(1, 1760, group=4, prefix=1600)
    assert router.cost(fleet[1], again)[0] == (160 + 160) / 16 + (110 + 10)


# -- several gateway replicas ---------------------------------------------------------------


def test_replicas_parse_and_reject_bad_counts() -> None:
    assert parse_replicas("gateway@4") == ("gateway", 4, Sharing())
    assert parse_replicas("gateway@4-unshared") == ("gateway", 4, None)
    assert parse_replicas("gateway:latency") is None
    for bad in ("gateway@0", "gateway@x", "@2", "gateway@4-shared", "gateway@-unshared"):
        with pytest.raises(ConfigError):
            parse_replicas(bad)
    with pytest.raises(ConfigError):
        make_policy("nope@2", [], 0)


def test_each_replica_keeps_its_own_view_of_the_fleet() -> None:
    fleet = pods(3)
    policy = make_policy("least-outstanding@2", fleet, 1)
    assert isinstance(policy, Replicated) and len(policy.replicas) == 2
    routed = [policy.route(req(i), 0.0) for i in range(8)]
    assert all(p in fleet for p in routed)  # callers always get the real pods back
    counts = [sum(r.outstanding) for r in policy.replicas]
    assert sum(counts) == 8 and min(counts) > 0  # each replica counts only its own
    gateway = make_policy("gateway@2", fleet, 1)
    assert isinstance(gateway, Replicated)
    views = [v[0].endpoint for v in gateway.views]
    assert views[0] is not views[1] is not fleet[0].endpoint
    assert views[0].name == fleet[0].endpoint.name


def test_peers_and_replicas_replay_identically(tmp_path: Path) -> None:
    scenario = tmp_path / "tiny.yaml"
    scenario.write_text(
        "name: tiny\nseed: 2\nduration_s: 15\n"
        "fleet:\n  - {name: h100, gpu: H100, model: llama-3.1-8b, replicas: 2}\n"
        "  - {name: a10g, gpu: A10G, model: llama-3.1-8b, replicas: 1}\n"
        "workload:\n  arrival: {kind: poisson, load: 0.8}\n"
        "  shared_prefixes: {share: 0.6, groups: 3, tokens: 1000}\n"
    )
    policies = ["production-stack-prefixaware", "sglang-cache-aware", "dynamo-kv", "gateway@2"]
    first = simulate(load_scenario(str(scenario)), policies)
    assert simulate(load_scenario(str(scenario)), policies) == first
    assert all(r["completed"] > 0 for r in first["policies"].values())
