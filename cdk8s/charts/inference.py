"""The routing resources: InferencePools (the HTTPRoutes' backends), InferenceObjectives per
priority band, InferenceModelRewrites for canaries, and the InferenceGatewayConfig.

A canary target of weight 0 is parked: it is left out of the rewrite, because upstream
weights start at 1 (and `CanarySpec` already refused a canary whose weights are all 0).
"""

from __future__ import annotations

from typing import Any

from constructs import Construct

from cdk8s import Chart
from envspec.environment import EnvironmentSpec
from envspec.workloads import canary_pool

from .base import PICKER, Placement, Wave, labels, manifest
from .picker import GRPC_PORT, gateway_config_resource

__all__ = ["InferenceChart", "objectives", "rewrite_spec"]

POOL_API = "inference.networking.k8s.io/v1"
X_API = "inference.networking.x-k8s.io/v1alpha2"


def objectives(env: EnvironmentSpec) -> list[tuple[str, int, str]]:
    """(resource name, priority, pool) of every InferenceObjective.

    Upstream objectives belong to one pool and names are unique per namespace, so an
    objective without a pool becomes one resource per pool, `<name>-<pool>` when there
    are several. Our picker matches the header against the config's names either way.
    """
    out = []
    pools = [p.name for p in env.gateway.pools]
    for objective in env.gateway.objectives:
        if objective.pool is not None:
            out.append((objective.name, objective.priority, objective.pool))
        elif len(pools) == 1:
            out.append((objective.name, objective.priority, pools[0]))
        else:
            out += [(f"{objective.name}-{p}", objective.priority, p) for p in pools]
    return out


def rewrite_spec(env: EnvironmentSpec, index: int) -> dict[str, Any]:
    canary = env.canaries[index]
    return {
        "poolRef": {
            "group": "inference.networking.k8s.io",
            "name": canary_pool(canary, env.gateway),
        },
        "rules": [
            {
                "matches": [{"model": {"type": "Exact", "value": canary.model}}],
                "targets": [
                    {"modelRewrite": t.model, "weight": t.weight}
                    for t in canary.targets
                    if t.weight > 0
                ],
            }
        ],
    }


class InferenceChart(Chart):
    def __init__(self, scope: Construct, construct_id: str, *, env: EnvironmentSpec) -> None:
        super().__init__(scope, construct_id, disable_resource_name_hashes=True)
        namespace = env.kubernetes.namespace
        common: Placement = {
            "namespace": namespace,
            "labels": labels(name="inference-gateway", component="routing"),
            "wave": Wave.CONFIG,
        }
        for pool in env.gateway.pools:
            manifest(
                self,
                f"pool-{pool.name}",
                api_version=POOL_API,
                kind="InferencePool",
                name=pool.name,
                **common,
                body={
                    "spec": {
                        # matchLabels only: upstream InferencePool v1 has no
                        # matchExpressions, and the environment validation refuses
                        # a pool that uses them (envspec/workloads.py)
                        "selector": {"matchLabels": dict(pool.selector.match_labels)},
                        "targetPorts": [{"number": pool.target_port}],
                        "endpointPickerRef": {
                            "group": "",
                            "kind": "Service",
                            "name": PICKER,
                            "port": {"number": GRPC_PORT},
                            "failureMode": pool.failure_mode,
                        },
                    }
                },
            )
        for name, priority, pool_name in objectives(env):
            manifest(
                self,
                f"objective-{name}",
                api_version=X_API,
                kind="InferenceObjective",
                name=name,
                **common,
                body={
                    "spec": {
                        "priority": priority,
                        "poolRef": {"group": "inference.networking.k8s.io", "name": pool_name},
                    }
                },
            )
        for i, canary in enumerate(env.canaries):
            manifest(
                self,
                f"rewrite-{canary.name}",
                api_version=X_API,
                kind="InferenceModelRewrite",
                name=canary.name,
                **common,
                body={"spec": rewrite_spec(env, i)},
            )
        resource = gateway_config_resource(env)
        manifest(
            self,
            "gateway-config",
            api_version=resource["apiVersion"],
            kind=resource["kind"],
            name=resource["metadata"]["name"],
            **common,
            body={"spec": resource["spec"]},
        )
