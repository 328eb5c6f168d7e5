"""Run the simulator with an arbitrary gateway config: the shared core of `igw tune` and
`igw what-if`.

A config is simulated as the `gateway` policy is (the gateway's own request path, see
`gateway.GatewayPolicy`), but with the caller's plugins, weights, profiles,
flow-control settings and objectives. The driver
builds policies by name, so a config is registered under a private name for the length
of one run and removed afterwards.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import yaml

from inference_gateway.config.spec import GatewayConfigSpec
from inference_gateway.core.scheduling.config_checks import parse_config
from inference_gateway.errors import ConfigError
from inference_gateway.sim.capacity import fleet_capacity
from inference_gateway.sim.driver import run_policy
from inference_gateway.sim.pods import SimPod
from inference_gateway.sim.policies import POLICIES
from inference_gateway.sim.scenario import Scenario

__all__ = ["load_gateway_config", "run_config", "shorten"]

_names = itertools.count()


def load_gateway_config(path: str | Path) -> GatewayConfigSpec:
    """A gateway config from a file: an `InferenceGatewayConfig` resource, a bare spec,
    or an environment file (`gitops/environments/<env>/environment.yaml`) whose
    `gateway:` section is the spec."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except OSError as error:
        raise ConfigError(str(path), [f"<root>: cannot read file: {error.strerror}"]) from None
    except yaml.YAMLError as error:
        raise ConfigError(str(path), [f"<yaml>: {error}"]) from None
    if isinstance(data, dict) and isinstance(data.get("gateway"), dict):
        return parse_config(data["gateway"], f"{path} (gateway)")
    return parse_config(data, str(path))


def shorten(scenario: Scenario, duration_s: float | None) -> Scenario:
    """The scenario cut to `duration_s` (same seed, so the same first requests)."""
    if duration_s is None or duration_s >= scenario.duration_s:
        return scenario
    return scenario.model_copy(update={"duration_s": float(duration_s)})


def run_config(
    scenario: Scenario,
    config: GatewayConfigSpec,
    *,
    profile: str | None = None,
    capacity_rps: float | None = None,
) -> dict[str, Any]:
    """The DESIGN §5 per-policy figures of `config` on `scenario`."""
    if profile is not None and profile not in {p.name for p in config.scheduling_profiles}:
        raise ConfigError("profile", [f"profile: no scheduling profile {profile!r} in the config"])
    if capacity_rps is None:
        capacity_rps = fleet_capacity(scenario.fleet, scenario.workload, scenario.seed)
    name = f"config-{next(_names)}"

    from inference_gateway.sim.gateway import GatewayPolicy

    def factory(policy_name: str, pods: list[SimPod], seed: int) -> GatewayPolicy:
        return GatewayPolicy(policy_name, pods, seed, config, profile=profile)

    POLICIES[name] = factory
    try:
        return run_policy(scenario, name, capacity_rps)
    finally:
        del POLICIES[name]
