"""A scheduling cycle explained: what each pod scored, why others were left out, bounded.

The scheduler is the real one over the default config (the `latency` profile: predicted
TTFT, prefix, LoRA affinity, KV-cache scorers); endpoints are built in memory with
explicit metrics, as the upstream picker's table tests build theirs.
"""

from __future__ import annotations

import pytest

from inference_gateway.config.spec import GatewayConfigSpec
from inference_gateway.core.request.decisions import DecisionLog
from inference_gateway.core.scheduling import Scheduler
from inference_gateway.core.scheduling.explain import NAMED_PER_REASON, TOP, Explanation
from inference_gateway.core.scheduling.types import Endpoint, LLMRequest, PodMetrics

MODEL = "llama-3.1-8b"


def pods(n: int, *, stale: int = 0, other_model: int = 0) -> list[Endpoint]:
    out = []
    for i in range(n):
        metrics = PodMetrics(waiting=i % 4, running=2, kv_usage=(i % 10) / 10)
        e = Endpoint(f"pod-{i}", "10.0.0.1", 8000 + i, metrics=metrics, stale=i < stale)
        if stale <= i < stale + other_model:
            e.models = frozenset({"other-model"})
        e.labels = {"igw.dev/gpu": "H100"}
        out.append(e)
    return out


def explained(endpoints: list[Endpoint], **request: object) -> tuple[Explanation, str]:
    scheduler = Scheduler(GatewayConfigSpec(), seed=1)
    llm = LLMRequest("r1", MODEL, prompt_tokens=200, explanation=Explanation(), **request)  # type: ignore[arg-type]
    ranked = scheduler.schedule(llm, endpoints)
    assert llm.explanation is not None
    llm.explanation.picked = ranked[0].name
    return llm.explanation, ranked[0].name


def test_every_candidate_has_each_scorers_clamped_score_and_the_weights_add_up() -> None:
    explanation, picked = explained(pods(6))
    summary = explanation.summary()
    assert summary["profile"] == "latency" and summary["candidates"] == 6
    assert summary["top"][0]["pod"] == picked  # the pick leads, whatever the tie-break
    weights = summary["weights"]
    assert weights and all(w > 0 for w in weights.values())
    for row in summary["top"]:
        assert set(row["scores"]) == set(weights)
        assert all(0.0 <= s <= 1.0 for s in row["scores"].values())
        total = sum(weights[name] * score for name, score in row["scores"].items())
        assert total == pytest.approx(row["total"], abs=1e-3)
        assert row["predictedTtftS"]["predicted-ttft-scorer"] > 0
    # the queue and KV figures differ, so the totals rank the pods best first after the pick
    totals = [row["total"] for row in summary["top"][1:]]
    assert totals == sorted(totals, reverse=True)


@pytest.mark.parametrize(
    ("endpoints", "subset", "reasons"),
    [
        (pods(5, stale=2), None, {"stale": 2}),
        (pods(5, other_model=2), None, {"model": 2}),
        (pods(5), frozenset({"10.0.0.1:8000", "10.0.0.1:8001"}), {"subset": 3}),
        (pods(6, stale=1, other_model=1), None, {"stale": 1, "model": 1}),
    ],
)
def test_pods_left_out_are_named_with_their_reason(
    endpoints: list[Endpoint], subset: frozenset[str] | None, reasons: dict[str, int]
) -> None:
    explanation, _ = explained(endpoints, subset=subset)
    summary = explanation.summary()
    assert {k: v["count"] for k, v in summary["excluded"].items()} == reasons
    assert summary["considered"] == len(endpoints)
    left_out = {p for entry in summary["excluded"].values() for p in entry["pods"]}
    assert not left_out & {row["pod"] for row in summary["top"]}


def test_a_summary_stays_small_however_large_the_pool() -> None:
    explanation, _ = explained(pods(500, stale=100))
    summary = explanation.summary()
    assert len(summary["top"]) == TOP
    assert summary["excluded"]["stale"] == {
        "count": 100,
        "pods": [f"pod-{i}" for i in range(NAMED_PER_REASON)],
    }
    log = DecisionLog(10, expand=dict)
    log.record("igw-1", "x" * 10_000, "ab" * 16, {"explanation": summary})
    [record] = list(log)
    assert len(record.client_id) == 128  # a client's id is cut, not kept whole
    assert log.nbytes() < 4096


def test_a_request_nobody_asks_about_keeps_nothing() -> None:
    scheduler = Scheduler(GatewayConfigSpec(), seed=1)
    llm = LLMRequest("r1", MODEL, prompt_tokens=200)
    scheduler.schedule(llm, pods(4))
    assert llm.explanation is None


def test_the_log_answers_for_its_last_capacity_requests_and_forgets_older_ones() -> None:
    """`igw explain` on a picker replica: any of the last 10,000 decisions is found (by
    internal id, request id or trace id), the 10,001st-newest is not, and the ring's
    size is what its records hold (bench/decision_log_memory.py measures the process)."""
    summary = explained(pods(64, stale=4))[0].summary()
    log = DecisionLog(10_000, expand=dict)
    for i in range(10_050):
        log.record(f"igw-{i}", f"req-{i}", f"{i:032x}", {"explanation": summary})
    assert len(log) == 10_000
    assert log.find("req-49") == [] and log.find(f"{49:032x}") == []
    for i in (50, 5_000, 10_049):
        for key in (f"igw-{i}", f"req-{i}", f"{i:032x}"):
            [found] = log.find(key)
            assert found["id"] == f"igw-{i}" and found["explanation"]["top"]
    assert log.nbytes() / len(log) < 2048
    assert [r["id"] for r in log.recent(2)] == ["igw-10049", "igw-10048"]


def test_two_requests_with_one_request_id_are_both_answered() -> None:
    log = DecisionLog(5, expand=dict)
    log.record("igw-1", "same", "", {"n": 1})
    log.record("igw-2", "same", "", {"n": 2})
    assert [r["n"] for r in log.find("same")] == [2, 1]
    assert DecisionLog(0).find("same") == [] and len(DecisionLog(0)) == 0


def test_the_ring_holds_nothing_the_collector_keeps_walking() -> None:
    """Kept records are plain tuples of strings, a float and bytes, which CPython's
    collector stops tracking at its first look (a NamedTuple it would walk in every
    collection for as long as the ring keeps it: 10,000 of them at the default)."""
    import gc

    log = DecisionLog(100, expand=dict)
    for i in range(100):
        log.record(f"igw-{i}", f"req-{i}", f"{i:032x}", {"n": i})
    gc.collect()
    assert not any(gc.is_tracked(kept) for kept in log._ring)
    assert [r.internal_id for r in log][-1] == "igw-99"  # read back as `Record`s
