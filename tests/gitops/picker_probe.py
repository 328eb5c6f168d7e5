"""The picker's readiness in the sync play: two models, and the real picker's answers.

The kubelet marks a picker pod Ready when its gRPC health service `readiness` answers
SERVING on the plain health port (`20-picker.k8s.yaml`: `readinessProbe.grpc`, port
9003, service `readiness`). What the picker answers depends on its code, so the play
takes the rule as a parameter:

* `waits_on_pods`: ready once a model-server pod of one of its pools is Ready (the
  deadlock of issue 22 item 1: the pods come in a later sync wave);
* `serves_when_configured`: ready once its config is there, whatever the pods (what
  upstream's EPP does: SERVING once its datastore synced the pool, pods or none);
* `real_picker_readings`: asks the real picker (`build_picker` with the rendered config,
  its health port on loopback) twice, with no pod and with one emulated vLLM pod of
  the pool, and answers the play from those two readings.
"""

from __future__ import annotations

import asyncio
import functools
from typing import Any

import grpc
import yaml
from grpc_health.v1 import health_pb2, health_pb2_grpc

from inference_gateway.assembly.picker import build_picker
from inference_gateway.core.scheduling.config_checks import parse_config
from inference_gateway.core.scheduling.types import Endpoint
from inference_gateway.emulator.fleet import EmulatedFleet

from .cluster_model import Cluster, PickerRule

__all__ = [
    "picker_config",
    "real_picker_readings",
    "rule_from_readings",
    "serves_when_configured",
    "waits_on_pods",
]

CONFIG_MAP = "igw-picker-config"


def picker_config(cluster: Cluster) -> dict[str, Any] | None:
    """The picker's config file as its ConfigMap mounts it, once the ConfigMap exists."""
    config_map = cluster.find("ConfigMap", CONFIG_MAP)
    if config_map is None:
        return None
    return _parsed(config_map["data"]["config.yaml"])


@functools.lru_cache(maxsize=8)
def _parsed(text: str) -> dict[str, Any]:
    """The config text parsed once (the play asks every step; the text rarely changes).
    Callers only read it."""
    document: dict[str, Any] = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    return document


def _model_pod_ready(cluster: Cluster) -> bool:
    config = picker_config(cluster)
    if config is None:
        return False
    return any(
        pod.ready for pool in config["spec"]["pools"] for pod in cluster.pods_of(pool["selector"])
    )


def waits_on_pods(cluster: Cluster) -> bool:
    return _model_pod_ready(cluster)


def serves_when_configured(cluster: Cluster) -> bool:
    return picker_config(cluster) is not None


async def _readiness(config: dict[str, Any], endpoints: list[Endpoint]) -> bool:
    picker = build_picker(
        endpoints,
        parse_config(config["spec"]),
        host="127.0.0.1",
        grpc_port=0,
        health_port=0,
        health_interval_s=0.05,
    )
    await picker.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{picker.health_bound}") as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            request = health_pb2.HealthCheckRequest(service="readiness")
            reply = await stub.Check(request, timeout=5)
        return bool(reply.status == health_pb2.HealthCheckResponse.SERVING)
    finally:
        await picker.stop(grace_s=0)


async def _readings(config: dict[str, Any]) -> tuple[bool, bool]:
    pool = config["spec"]["pools"][0]
    fleet_spec = {
        "base_port": 0,
        "pods": [{"name": "vllm", "gpu": pool.get("gpu", "A10G"), "model": "llama-3.1-8b",
                  "replicas": 1}],
    }  # fmt: skip
    without = await _readiness(config, [])
    async with EmulatedFleet(fleet_spec) as fleet:
        pods = [
            Endpoint(e.name, e.host, e.port, pool=pool["name"], labels=dict(pool["selector"]))
            for e in fleet.endpoints
        ]
        with_pod = await _readiness(config, pods)
    return without, with_pod


def real_picker_readings(config: dict[str, Any]) -> tuple[bool, bool]:
    """The real picker's readiness with no model pod, and with one fresh model pod."""
    return asyncio.run(_readings(config))


def rule_from_readings(without: bool, with_pod: bool) -> PickerRule:
    """The play's rule from the two readings, looked up by whether the cluster has a
    ready model pod."""

    def rule(cluster: Cluster) -> bool:
        if picker_config(cluster) is None:
            return False
        return with_pod if _model_pod_ready(cluster) else without

    return rule
