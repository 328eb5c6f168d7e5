"""The managed documentation's own example configs (examples/managed/, each transcribed
with its source) convert both ways, validate as every reader reads them, and route like
this project's config with the same weights and scorers: the simulator's P99 TTFT on
`mixed-fleet-bursty` within 1 % of the native config's.

The scenario runs its first 60 s here (about a second a run; the simulator is
deterministic for a seed). The full 1,800 s gives the same figures to the digit
(docs/managed-gateway.md, "Routing: the simulator"), since the converted config is the
native one; what this test guards is that it stays so.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from inference_gateway.cli.validate import validate_files
from inference_gateway.config.convert import convert_resource
from inference_gateway.config.spec import read_yaml
from inference_gateway.core.scheduling.config_checks import (
    load_config,
    parse_config,
    plugin_problems,
)
from inference_gateway.sim.configs import run_config, shorten
from inference_gateway.sim.scenario import load_scenario

EXAMPLES = Path(__file__).parents[3] / "examples" / "managed"
#: Each example and the native config with the same weights and scorers, written in
#: this project's own names (the default profile, `latency`, unless weights retune it).
NATIVE: dict[str, dict[str, Any]] = {
    "gateway-single.yaml": {},
    "gateway-bbr.yaml": {},
    "gateway-no-prefix.yaml": {
        "weights": {
            "precisePrefixCache": 0,
            "queue-scorer": 3,
            "kv-cache-utilization-scorer": 2,
        }
    },
}


def test_every_transcribed_example_is_covered_and_names_its_source() -> None:
    shipped = {p.name for p in EXAMPLES.glob("gateway-*.yaml")}
    assert shipped == set(NATIVE)
    for name in shipped:
        text = (EXAMPLES / name).read_text()
        assert "Transcribed from" in text and "awslabs" in text and " at " in text


@pytest.mark.parametrize("name", sorted(NATIVE))
def test_an_example_converts_both_ways_and_validates(name: str, capsys: Any) -> None:
    managed = read_yaml(EXAMPLES / name)
    native, _ = convert_resource(managed, None, name, checks=plugin_problems)
    assert native["apiVersion"] == "inference.igw.dev/v1alpha1"
    assert parse_config(native) == parse_config(managed) == load_config(EXAMPLES / name)
    again, _ = convert_resource(native, "managed", name, checks=plugin_problems)
    back, _ = convert_resource(again, "native", name, checks=plugin_problems)
    assert back == native
    assert validate_files([EXAMPLES / name]) == 0
    assert "ok (config" in capsys.readouterr().out


@pytest.fixture(scope="module")
def scenario() -> Any:
    return shorten(load_scenario("mixed-fleet-bursty"), 60.0)


@pytest.fixture(scope="module")
def native_p99(scenario: Any) -> dict[str, float]:
    """P99 TTFT of each distinct native config, run once."""
    out: dict[str, float] = {}
    for data in NATIVE.values():
        key = repr(data)
        if key not in out:
            out[key] = run_config(scenario, parse_config(data))["ttft_p99_s"]
    return out


@pytest.mark.parametrize("name", sorted(NATIVE))
def test_a_converted_example_routes_within_one_percent_of_native(
    name: str, scenario: Any, native_p99: dict[str, float]
) -> None:
    converted = load_config(EXAMPLES / name)
    p99 = run_config(scenario, converted)["ttft_p99_s"]
    assert p99 == pytest.approx(native_p99[repr(NATIVE[name])], rel=0.01)


def test_the_weights_example_is_not_the_default_profile(native_p99: dict[str, float]) -> None:
    """The 1 % comparison above can tell configs apart: the example's weights route the
    scenario differently from the default profile."""
    default, weighted = native_p99[repr({})], native_p99[repr(NATIVE["gateway-no-prefix.yaml"])]
    assert weighted != pytest.approx(default, rel=0.01)
