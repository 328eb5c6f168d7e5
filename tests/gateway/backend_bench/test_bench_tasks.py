"""The built-in count_ids task: its cases, its scoring, and agreement with the emulator."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from inference_gateway.backend_bench.tasks import ToolCase, count_ids, score_reply, tool_cases
from inference_gateway.emulator.behaviors import parse_comparison


def _reply(
    name: str = "count_ids", arguments: Any = None, raw: str | None = None
) -> dict[str, Any]:
    text = raw if raw is not None else orjson.dumps(arguments).decode()
    call = {"id": "c", "type": "function", "function": {"name": name, "arguments": text}}
    return {"choices": [{"message": {"role": "assistant", "tool_calls": [call]}}]}


def test_twenty_cases_cover_every_op_at_least_three_times() -> None:
    cases = tool_cases()
    assert len(cases) == 20
    for op in ("eq", "ne", "lt", "le", "gt", "ge"):
        assert sum(c.op == op for c in cases) >= 3


def test_every_case_reads_back_by_the_emulators_documented_rule() -> None:
    for case in tool_cases():
        assert parse_comparison(case.question) == (case.op, case.value), case.question


@pytest.mark.parametrize(
    ("op", "value", "answer"),
    [("gt", 420, 580), ("lt", 17, 16), ("ge", 250, 751), ("le", 999, 999), ("eq", 64, 1),
     ("ne", 500, 999)],
)  # fmt: skip
def test_known_answers(op: str, value: int, answer: int) -> None:
    assert count_ids(op, value) == answer


CASE = ToolCase("How many IDs are greater than 420?", "gt", 420)


@pytest.mark.parametrize(
    ("response", "called", "filter_ok"),
    [
        (_reply(arguments={"op": "gt", "value": 420}), True, True),
        (_reply(arguments={"op": "gt", "value": "420"}), True, True),
        (_reply(arguments={"op": "gt", "value": 421}), True, False),
        (_reply(arguments={"op": "ge", "value": 420}), True, False),
        (_reply(name="other", arguments={"op": "gt", "value": 420}), False, False),
        (_reply(raw="{not json"), False, False),
        (_reply(arguments=[1, 2]), False, False),
        ({"choices": [{"message": {"role": "assistant", "content": "580"}}]}, False, False),
    ],
)
def test_scoring(response: dict[str, Any], called: bool, filter_ok: bool) -> None:
    score = score_reply(CASE, response)
    assert (score.called, score.filter_ok) == (called, filter_ok)
    assert (score.detail == "") == filter_ok
