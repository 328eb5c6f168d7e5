"""`igw tune` and `igw what-if` through the CLI on a tiny scenario."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from inference_gateway.cli.main import main
from inference_gateway.config.spec import GatewayConfigSpec

TINY = """
name: tiny
seed: 4
duration_s: 20
fleet:
  - {name: h100, gpu: H100, model: llama-3.1-8b, replicas: 1}
  - {name: a10g, gpu: A10G, model: llama-3.1-8b, replicas: 1}
workload:
  arrival: {kind: poisson, load: 0.7}
  prompt_tokens: {dist: lognormal, median: 600, sigma: 0.5, max: 3000}
  output_tokens: {dist: lognormal, median: 60, sigma: 0.5, max: 400}
  shared_prefixes: {share: 0.5, groups: 4, tokens: 800}
"""

UPSTREAM = """
apiVersion: inference.igw.dev/v1alpha1
kind: InferenceGatewayConfig
metadata: {name: candidate}
spec:
  plugins:
    - {type: queue-scorer}
    - {type: kv-cache-utilization-scorer}
    - {type: prefix-cache-scorer}
    - {type: max-score-picker}
  schedulingProfiles:
    - name: latency
      plugins:
        - {pluginRef: queue-scorer, weight: 2}
        - {pluginRef: kv-cache-utilization-scorer, weight: 2}
        - {pluginRef: prefix-cache-scorer, weight: 3}
        - {pluginRef: max-score-picker}
"""


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("whatif")
    out = {"scenario": root / "tiny.yaml", "head": root / "head.yaml", "base": root / "env.yaml"}
    out["scenario"].write_text(TINY)
    out["head"].write_text(UPSTREAM)
    # an environment file: its `gateway:` section is the config (shipped profiles)
    out["base"].write_text("name: dev\ngateway:\n  defaultProfile: latency\n")
    return out


def test_what_if_reports_the_change_between_two_configs(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["what-if", "--base", str(files["base"]), "--head", str(files["head"])]
    argv += ["--scenario", str(files["scenario"]), "--json"]
    assert main(argv) == 0
    first = capsys.readouterr().out
    result = json.loads(first)
    assert result["scenario"] == "tiny" and result["verdict"] == "pass"
    p99 = result["changes"]["ttft_p99_s"]
    assert p99["change"] == pytest.approx(p99["head"] - p99["base"], abs=1e-5)
    assert set(result["changes"]) >= {"ttft_p95_s", "ttft_p99_s", "output_tokens_per_s", "rejected"}
    assert main(argv) == 0
    assert capsys.readouterr().out == first  # same seed, same numbers
    # the same config on both sides changes nothing, and never fails the gate
    same = ["what-if", "--base", str(files["head"]), "--head", str(files["head"])]
    same += ["--scenario", str(files["scenario"]), "--json", "--fail-above", "0"]
    assert main(same) == 0
    changes = json.loads(capsys.readouterr().out)["changes"]
    assert all(c["change"] == 0 for c in changes.values())


def test_what_if_gate_and_bad_config(
    files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["what-if", "--base", str(files["base"]), "--head", str(files["head"])]
    argv += ["--scenario", str(files["scenario"]), "--json", "--fail-above", "-100"]
    assert main(argv) == 1  # any P99 above −100% of base "regresses" past this gate
    captured = capsys.readouterr()
    p99 = json.loads(captured.out)["changes"]["ttft_p99_s"]
    assert (
        f"P99 TTFT changed by {p99['change_pct']:+.1f}% ({p99['base']:.3f} s -> "
        f"{p99['head']:.3f} s), above --fail-above -100%" in captured.err
    )
    bad = tmp_path / "bad.yaml"
    bad.write_text("schedulingProfiles:\n  - name: latency\n    plugins: [{pluginRef: nope}]\n")
    assert main(["what-if", "--base", str(bad), "--head", str(files["head"])]) == 2
    assert "pluginRef" in capsys.readouterr().err


def test_tune_keeps_the_current_weights_as_a_trial_and_ranks_by_p99(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["tune", str(files["scenario"]), "--trials", "4", "--json"]
    assert main(argv) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["profile"] == "latency"
    assert result["current"]["weights"] == {
        "predicted-ttft-scorer": 6,
        "prefix-cache-scorer": 1,
        "lora-affinity-scorer": 6,
        "kv-cache-utilization-scorer": 1,
    }
    trials = result["trials"]
    assert len(trials) == 4 and result["current"] in trials
    keys = [(t["rejected"], t["ttft_p99_s"], t["ttft_p95_s"]) for t in trials]
    assert keys == sorted(keys) and result["best"] == trials[0]
    assert result["best"]["ttft_p99_s"] <= result["current"]["ttft_p99_s"]
    # every row names the scorers in one order, the config's plugin order
    order = [p.instance_name for p in GatewayConfigSpec().plugins]
    for t in trials:
        assert list(t["weights"]) == sorted(t["weights"], key=order.index)
    assert main(["tune", str(files["scenario"]), "--profile", "nope"]) == 2
