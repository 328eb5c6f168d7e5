"""The emulator's tool-call rule and deliberate imperfections (emulator/behaviors.py).

Pure functions first, then the same behaviours through the official `openai` SDK against
an emulated pod on loopback.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import openai
import orjson
import pytest

from inference_gateway.backend_bench.tasks import COUNT_IDS_TOOL
from inference_gateway.emulator.behaviors import (
    Jitter,
    PodBehavior,
    decide_tool_call,
    parse_comparison,
    unit_hash,
)
from inference_gateway.emulator.fleet import EmulatedFleet


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("How many IDs are greater than 420?", ("gt", 420)),
        ("count those greater than or equal to 7", ("ge", 7)),
        ("IDs not equal to 5", ("ne", 5)),
        ("IDs EQUAL TO 12", ("eq", 12)),
        ("at most -3 please", ("le", -3)),
        ("fewer than 10 and more than 2", ("lt", 10)),
        ("no comparison here", None),
        ("greater than nothing", None),
    ],
)
def test_parse_comparison(text: str, expected: tuple[str, int] | None) -> None:
    assert parse_comparison(text) == expected


def _body(question: str, **extra: object) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": question}], "tools": [COUNT_IDS_TOOL],
            **extra}  # fmt: skip


def test_tool_call_rule_and_error_rates() -> None:
    q = "How many IDs are below 640?"
    call = decide_tool_call(_body(q), q, PodBehavior())
    assert call is not None and call.call is not None
    assert call.call.name == "count_ids"
    assert orjson.loads(call.call.arguments) == {"op": "lt", "value": 640}
    wrong = decide_tool_call(_body(q), q, PodBehavior(tool_call_error_rate=1.0))
    assert wrong is not None and wrong.call is not None
    assert orjson.loads(wrong.call.arguments) == {"op": "lt", "value": 641}
    missed = decide_tool_call(_body(q), q, PodBehavior(tool_call_miss_rate=1.0))
    assert missed is not None and missed.call is None
    assert decide_tool_call({"messages": []}, q, PodBehavior()) is None
    assert decide_tool_call(_body(q, tool_choice="none"), q, PodBehavior()) is None


def test_error_rate_hits_a_deterministic_fraction() -> None:
    rolls = [unit_hash(f"prompt {i}", 3, "tool") for i in range(2000)]
    assert rolls == [unit_hash(f"prompt {i}", 3, "tool") for i in range(2000)]
    assert 0.45 < sum(r < 0.5 for r in rolls) / len(rolls) < 0.55


def test_jitter_only_at_temperature_zero_and_distinct() -> None:
    jitter = Jitter(PodBehavior(temperature0_jitter=1.0))
    seeds = [jitter.output_seed(100, 0) for _ in range(5)]
    assert len(set(seeds)) == 5 and 100 not in seeds
    assert jitter.output_seed(100, 0.7) == 100
    assert Jitter(PodBehavior()).output_seed(100, 0) == 100


FLEET = {
    "base_port": 0,
    "pods": [
        {"name": "good", "gpu": "H100", "model": "llama-3.1-8b"},
        {
            "name": "bad",
            "gpu": "H100",
            "model": "llama-3.1-8b",
            "behavior": {"tool_call_error_rate": 1.0, "temperature0_jitter": 1.0},
        },
    ],
}


@pytest.fixture
async def fleet() -> AsyncIterator[EmulatedFleet]:
    async with EmulatedFleet(FLEET) as fleet:
        yield fleet


async def test_openai_sdk_sees_tool_calls_and_jitter(fleet: EmulatedFleet) -> None:
    question = "How many IDs are at least 250?"
    outputs: dict[str, set[str]] = {}
    for name, expected in (("good", 250), ("bad", 251)):
        client = openai.AsyncOpenAI(
            base_url=fleet.pods[name].url + "/v1", api_key="k", max_retries=0
        )
        reply = await client.chat.completions.create(
            model="llama-3.1-8b",
            messages=[{"role": "user", "content": question}],
            tools=[COUNT_IDS_TOOL],
        )
        choice = reply.choices[0]
        assert choice.finish_reason == "tool_calls"
        assert choice.message.tool_calls is not None
        call = choice.message.tool_calls[0]
        assert call.function.name == "count_ids"  # type: ignore[union-attr]
        assert orjson.loads(call.function.arguments) == {"op": "ge", "value": expected}  # type: ignore[union-attr]
        assert reply.usage is not None and reply.usage.completion_tokens >= 1
        outputs[name] = set()
        for _ in range(3):
            text = await client.chat.completions.create(
                model="llama-3.1-8b",
                messages=[{"role": "user", "content": "same prompt"}],
                max_tokens=4,
                temperature=0,
            )
            outputs[name].add(text.choices[0].message.content or "")
        await client.close()
    assert len(outputs["good"]) == 1
    assert len(outputs["bad"]) == 3


def test_fleet_rejects_unknown_behavior_keys() -> None:
    from inference_gateway.errors import ConfigError

    spec = {"base_port": 0, "pods": [{"name": "p", "gpu": "H100", "model": "llama-3.1-8b",
                                      "behavior": {"typo_rate": 1}}]}  # fmt: skip
    with pytest.raises(ConfigError) as error:
        EmulatedFleet(spec)
    assert any("pods[0].behavior.typo_rate" in p for p in error.value.problems)


def test_emulate_cli_flags_reach_the_pod_behavior() -> None:
    from inference_gateway.cli.main import build_parser
    from inference_gateway.emulator.cli import build_spec

    args = build_parser("emulate").parse_args(
        ["emulate", "--gpu", "L4", "--model", "llama-3.1-8b", "--port", "0",
         "--tool-call-error-rate", "0.25", "--temperature0-jitter", "1"]
    )  # fmt: skip
    spec, _ = build_spec(args)
    behavior = spec.pods[0].behavior
    assert (behavior.tool_call_error_rate, behavior.temperature0_jitter) == (0.25, 1.0)
    assert behavior.tool_call_miss_rate == 0.0
