"""Disaggregated prefill and decode in the simulator (issue 25).

The P/D picks are the real director's (`gateway-pd`: llm-d's role filters, decider and
profile handler, config shape from llm-d-inference-scheduler
`pkg/plugins/profile/pd_profile_handler.go` and `prefix_based_pd_decider.go`); the legs
follow the emulator's NixlConnector rules (`emulator/kvtransfer.py`, after vLLM's
`nixl_connector.py`: the prefill leg keeps its blocks, the decode pod reads them over the
link and prefills only what the read did not bring). Nothing is mocked.
"""

from __future__ import annotations

import os
import subprocess
import sys

import orjson
import pytest

from inference_gateway.core.scheduling.pd import ROLE_LABEL
from inference_gateway.emulator.engine import EngineRequest
from inference_gateway.emulator.kvtransfer import link_gbytes_per_s, transfer_seconds
from inference_gateway.emulator.profiles import BLOCK_SIZE
from inference_gateway.errors import ConfigError
from inference_gateway.sim.disagg import PrefillLeg, Split, Transfers, pd_claim
from inference_gateway.sim.pods import build_fleet
from inference_gateway.sim.runner import simulate
from inference_gateway.sim.scenario import Disaggregation, Scenario, load_scenario
from inference_gateway.sim.workload import SimRequest


class _Record:
    """Engine listener: what finished when (the driver's own listener needs a policy)."""

    def __init__(self) -> None:
        self.finished: list[tuple[EngineRequest, float]] = []

    def on_first_token(self, request: EngineRequest, time: float) -> None:
        return None

    def on_finish(self, request: EngineRequest, time: float) -> None:
        self.finished.append((request, time))

    def on_step(self, time: float) -> None:
        return None


def _run(engine_pod: object, request: EngineRequest, now: float, record: _Record) -> float:
    """Submit and step the pod's engine until `request` finishes; its finish time."""
    engine = engine_pod.engine  # type: ignore[attr-defined]
    engine.submit(request, now)
    for _ in range(100_000):  # bounded: a request of a few hundred steps
        if any(r is request for r, _ in record.finished):
            break
        assert engine.busy_until is not None
        engine.advance(engine.busy_until)
    return next(t for r, t in record.finished if r is request)


def test_legs_keep_move_and_release_the_prompts_blocks() -> None:
    """A prefill leg's blocks stay on the prefill pod until the read, which lands after
    the emulator's transfer time; the decode pod then computes only the prompt's last
    partial block and lets the read blocks go when the request ends."""
    scenario = load_scenario("disagg-long-prompts")
    record = _Record()
    pods = build_fleet(scenario.fleet, record, None, scenario.disaggregation)
    prefill, decode = pods[0], pods[-1]
    assert prefill.endpoint.labels[ROLE_LABEL] == "prefill"
    assert decode.endpoint.labels[ROLE_LABEL] == "decode"
    reads: list[tuple[float, PrefillLeg]] = []
    transfers = Transfers(lambda t, leg: reads.append((t, leg)))
    sim = SimRequest(t=0.0, prompt_tokens=7003, output_tokens=40, request_id=7)
    leg_request = transfers.start(sim, Split(decode, prefill), 0.0)
    assert leg_request.output_tokens == 1  # max_tokens 1, as the prefill leg is sent
    done = _run(prefill, leg_request, 0.0, record)
    transfers.prefilled(leg_request.tag, done)
    blocks = 7003 // BLOCK_SIZE
    assert prefill.engine.pool.used == blocks  # kept for the decode pod's read
    link = link_gbytes_per_s(prefill.profile.instance, None, decode.profile.instance, None)
    ((at, leg),) = reads
    assert at == pytest.approx(
        done + transfer_seconds(blocks, decode.profile.model.kv_bytes_per_token, link)
    )
    decode_request, pod = transfers.arrived(leg)
    assert pod is decode and prefill.engine.pool.used == 0
    _run(decode, decode_request, at, record)
    assert decode_request.cached_tokens == blocks * BLOCK_SIZE  # 3 tokens left to compute
    assert decode.engine.pool.used == blocks  # the read blocks, pinned until the end
    transfers.finished(sim.request_id)
    assert decode.engine.pool.used == 0
    assert transfers.report() == {"prefill_legs": 1, "kv_read_fallbacks": 0}


def test_shipped_disagg_scenario_halves_p99_tpot() -> None:
    """Issue 25's must-hold on the shipped scenario as shipped (240 simulated s, a few
    CPU seconds): the same 8 GPUs split 7 prefill + 1 decode against all aggregated."""
    scenario = load_scenario("disagg-long-prompts")
    result = simulate(scenario, ["gateway", "gateway-pd"])["policies"]
    gateway, split = result["gateway"], result["gateway-pd"]
    assert gateway["prefill_legs"] == 0
    assert split["prefill_legs"] == split["completed"] == gateway["completed"]
    assert split["kv_read_fallbacks"] == 0
    assert split["tpot_p99_s"] <= 0.5 * gateway["tpot_p99_s"]
    assert split["ttft_p99_s"] <= 1.2 * gateway["ttft_p99_s"]
    # equal throughput: every request served by both, tokens/s apart only by when the
    # last answer ends (sim.disagg.PD_THROUGHPUT_EQUAL)
    assert split["output_tokens_per_s"] >= 0.995 * gateway["output_tokens_per_s"]
    assert pd_claim(gateway, split)["pass"]
    assert not pd_claim(gateway, {**split, "completed": split["completed"] - 1})["pass"]


def test_short_prompts_stay_aggregated_under_the_threshold() -> None:
    """Where P/D loses: prompts under nonCachedTokens are served whole (no prefill leg, no
    transfer) on the best pod of either role (the handler's aggregatedProfile), so the
    split fleet answers them as the aggregated one does, and sooner than splitting them
    anyway does."""
    scenario = load_scenario("disagg-short-prompts").model_copy(update={"duration_s": 60.0})
    result = simulate(scenario, ["gateway", "gateway-pd", "gateway-pd-always"])["policies"]
    whole, kept, always = result["gateway"], result["gateway-pd"], result["gateway-pd-always"]
    assert kept["completed"] > 100 and kept["prefill_legs"] == 0
    assert always["prefill_legs"] == always["completed"]
    assert kept["ttft_p50_s"] < always["ttft_p50_s"]
    for quantile in ("ttft_p50_s", "ttft_p99_s"):
        assert kept[quantile] <= 1.05 * whole[quantile], quantile


def test_split_must_fit_the_fleet_and_gateway_pd_needs_one() -> None:
    scenario = load_scenario("disagg-short-prompts")
    data = scenario.model_dump()
    for prefill in ({"h100": 8}, {"h100": 0}, {"a100": 1}):
        data["disaggregation"] = {"prefill": prefill}
        with pytest.raises(ValueError, match=r"disaggregation\.prefill"):
            Scenario.model_validate(data)
    unsplit = scenario.model_copy(update={"disaggregation": None, "duration_s": 1.0})
    with pytest.raises(ConfigError, match="disaggregation split"):
        simulate(unsplit, ["gateway-pd"])
    assert Disaggregation(prefill={"h100": 1}).non_cached_tokens == 512


def test_tpot_in_json_and_table() -> None:
    """`igw simulate --json` carries each policy's TPOT and prefill legs; the table shows
    TPOT columns (run as a user would, in a child process)."""
    env = {**os.environ, "COLUMNS": "80"}
    argv = [sys.executable, "-m", "inference_gateway.cli.main", "simulate"]
    argv += ["disagg-long-prompts", "--duration", "20"]
    out = subprocess.run([*argv, "--json"], env=env, capture_output=True, timeout=120, check=True)
    policies = orjson.loads(out.stdout)["policies"]
    assert set(policies) == {"gateway", "gateway-pd"}
    for report in policies.values():
        assert 0 < report["tpot_p50_s"] <= report["tpot_p99_s"]
    assert policies["gateway-pd"]["prefill_legs"] > 0
    table = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, check=True)
    assert "TPOT" in table.stdout
