"""The simulator: determinism, bad input, and the routing claim on a small mixed fleet."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from inference_gateway.cli.main import main
from inference_gateway.sim.runner import simulate
from inference_gateway.sim.scenario import load_scenario, shipped_scenarios

SMALL = """
name: small-mixed
seed: 3
duration_s: 90
fleet:
  - {name: h100, gpu: H100, model: llama-3.1-8b, replicas: 2}
  - {name: a10g, gpu: A10G, model: llama-3.1-8b, replicas: 2}
workload:
  arrival: {kind: bursty, load: 0.7, burst_factor: 3, burst_s: 10, period_s: 60}
  prompt_tokens: {dist: lognormal, median: 800, sigma: 0.8, max: 6000}
  output_tokens: {dist: lognormal, median: 150, sigma: 0.6, max: 2000}
  shared_prefixes: {share: 0.5, groups: 8, tokens: 1500}
policies: [gateway, round-robin, oracle]
"""


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("scenario") / "small.yaml"
    path.write_text(SMALL)
    return path


def test_same_seed_same_output(small: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", str(small), "--json", "--policies", "gateway,least-outstanding"]) == 0
    first = capsys.readouterr().out
    assert main(["simulate", str(small), "--json", "--policies", "gateway,least-outstanding"]) == 0
    assert capsys.readouterr().out == first
    result = json.loads(first)
    assert set(result) == {"scenario", "seed", "capacity_rps", "policies"}
    assert set(result["policies"]["gateway"]) >= {
        "ttft_p50_s",
        "ttft_p95_s",
        "ttft_p99_s",
        "e2e_p50_s",
        "e2e_p99_s",
        "tpot_p50_s",
        "tpot_p99_s",
        "output_tokens_per_s",
        "completed",
        "rejected",
        "cost_per_million_tokens",
    }


def test_tpot_is_time_per_output_token_after_the_first() -> None:
    from inference_gateway.sim.metrics import Observer

    observer = Observer()
    observer.on_finish(0.0, 0.5, 2.5, 5, "standard")  # 4 tokens after the first in 2 s
    observer.on_finish(0.0, 0.2, 0.2, 1, "standard")  # one token: no TPOT
    report = observer.report(duration_s=3.0, fleet_usd_per_hour=1.0)
    assert report["tpot_p50_s"] == report["tpot_p99_s"] == 0.5


def test_gateway_beats_round_robin_and_tracks_oracle(small: Path) -> None:
    result = simulate(load_scenario(str(small)))["policies"]
    assert result["gateway"]["ttft_p99_s"] < 0.2 * result["round-robin"]["ttft_p99_s"]
    assert result["gateway"]["ttft_p99_s"] < 1.5 * result["oracle"]["ttft_p99_s"]
    assert result["gateway"]["output_tokens_per_s"] >= result["round-robin"]["output_tokens_per_s"]


@pytest.mark.parametrize(
    ("patch", "field"),
    [
        ("duration_s: -1", "duration_s"),
        ("bogus_key: 1", "bogus_key"),
        ("fleet:\n  - {name: x, gpu: H100, model: llama-3.1-8b, replicas: 0}", "fleet[0].replicas"),
    ],
)
def test_malformed_scenario_exits_2_naming_the_field(
    tmp_path: Path, patch: str, field: str, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = [ln for ln in SMALL.splitlines() if not ln.startswith(patch.split(":")[0] + ":")]
    if patch.startswith("fleet"):
        lines = [ln for ln in lines if not ln.startswith("  - {name: ")]
    path = tmp_path / "bad.yaml"
    path.write_text("\n".join(lines) + "\n" + patch + "\n")
    assert main(["simulate", str(path)]) == 2
    err = capsys.readouterr().err
    assert field in err and "Traceback" not in err


def test_shipped_scenarios_load() -> None:
    names = shipped_scenarios()
    for required in (
        "mixed-fleet-bursty",
        "shared-prefix",
        "lora-mix",
        "homogeneous-steady",
        "long-context",
    ):
        assert required in names
        assert load_scenario(required).name == required


def test_admission_keeps_critical_ttft_under_twice_overload() -> None:
    """2x overload: critical P99 TTFT stays within 1.5x of its unloaded P99, sheddable
    requests take the rejections (the full 300 s figures are in the bench report)."""
    overload = load_scenario("overload-priorities").model_copy(update={"duration_s": 120.0})
    unloaded = overload.model_copy(
        update={
            "workload": overload.workload.model_copy(
                update={"arrival": overload.workload.arrival.model_copy(update={"load": 0.3})}
            )
        }
    )
    hot = simulate(overload, ["gateway"])["policies"]["gateway"]
    cold = simulate(unloaded, ["gateway"])["policies"]["gateway"]
    assert hot["ttft_p99_s_by_band"]["critical"] <= 1.5 * cold["ttft_p99_s_by_band"]["critical"]
    assert hot["rejected_by_band"]["sheddable"] > hot["rejected_by_band"].get("critical", 0) == 0
