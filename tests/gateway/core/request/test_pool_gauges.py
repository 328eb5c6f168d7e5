"""The pool gauges KEDA scales the model servers on, read the way Prometheus reads them:
the text exposition of the director's registry after `refresh_gauges` (what every
`/metrics` read runs).

The rule they must follow is KEDA's: its Prometheus scaler reports a trigger active while
the query reads above `activationThreshold` (kedacore/keda v2.17 `pkg/scalers/
prometheus_scaler.go`, `val > activationThreshold`, default 0), and a ScaledObject goes
to zero replicas only when no trigger is active. The rendered ScaledObjects read
`max(inference_pool_saturation{name=<pool>})` (cdk8s/charts/autoscaling.py): a pool that
has no ready pod, or no pod at all, must read 0 there, never the last value it had.
"""

from __future__ import annotations

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from inference_gateway.core.request.contracts import RoutingState
from inference_gateway.core.request.director import Director
from inference_gateway.core.scheduling import Endpoint, PodMetrics, Scheduler
from inference_gateway.core.scheduling.config_checks import parse_config

MODEL = "llama-3.1-8b"
POOL_GAUGES = (
    "inference_pool_saturation",
    "inference_pool_ready_pods",
    "inference_pool_average_kv_cache_utilization",
    "inference_pool_average_queue_size",
)


def config(*pools: str):  # type: ignore[no-untyped-def]
    return parse_config(
        {
            "pools": [{"name": p, "selector": {"pool": p}} for p in pools],
            "models": [{"name": f"{MODEL}-{p}", "pool": p} for p in pools],
        },
        "test",
    )


def exposed(director: Director, pods: list[Endpoint]) -> dict[tuple[str, str], float]:
    """(metric, pool) -> value of the pool gauges in the text Prometheus would scrape."""
    by_pool: dict[str, list[Endpoint]] = {}
    for pod in pods:
        by_pool.setdefault(pod.pool, []).append(pod)
    director.refresh_gauges(by_pool)
    text = generate_latest(director.metrics.registry).decode()
    return {
        (sample.name, sample.labels["name"]): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name in POOL_GAUGES
    }


def test_a_pool_without_ready_pods_reads_zero_saturation_and_a_removed_one_goes() -> None:
    spec = config("p", "q")
    busy = Endpoint(
        "p-0", "10.0.0.1", 8000, pool="p", models=frozenset({f"{MODEL}-p"}), stale=False
    )
    busy.metrics = PodMetrics(waiting=50, running=8, kv_usage=0.95)
    director = Director(lambda: [busy], Scheduler(spec), RoutingState.build(spec))

    gauges = exposed(director, [busy])
    assert gauges["inference_pool_saturation", "p"] > 1  # full: KEDA scales it up
    assert gauges["inference_pool_ready_pods", "p"] == 1

    busy.stale = True  # its scrapes fail: the pod is going away
    gauges = exposed(director, [busy])
    assert gauges["inference_pool_saturation", "p"] == 0.0
    assert gauges["inference_pool_ready_pods", "p"] == 0

    gauges = exposed(director, [])  # KEDA removed the last replica: no endpoint left
    for name in POOL_GAUGES:
        assert gauges[name, "p"] == 0.0, name
    assert gauges["inference_pool_saturation", "q"] == 0.0  # configured, never had a pod

    shrunk = config("q")  # the pool left the config as well: its series go
    director.reload(RoutingState.build(shrunk))
    gauges = exposed(director, [])
    assert not [key for key in gauges if key[1] == "p"]
    assert gauges["inference_pool_saturation", "q"] == 0.0
