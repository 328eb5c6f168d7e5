"""The built-in function-calling task: a `count_ids(op, value)` tool and 20 cases.

Each case asks, in plain English, how many IDs of a table satisfy one comparison
("How many IDs are greater than 420?"); a correct model calls `count_ids` with
`{"op": "gt", "value": 420}`. Two scores, each out of the number of cases:

* **calls** — the reply holds a call to `count_ids` with a JSON-object argument string;
* **filters** — that call's `op` and `value` are the expected ones (`value` may be a
  number or a numeric string: some servers' parsers emit strings, and the filter is
  still right).

The phrasings are those the emulator's tool rule reads (`emulator/behaviors.py`), so an
emulated pod scores 20/20 unless told to misbehave; the answer (the count over IDs
1..1000) is known for each case, for a follow-up turn if one is ever wanted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

__all__ = [
    "COUNT_IDS_TOOL",
    "SYSTEM_PROMPT",
    "ToolCase",
    "ToolScore",
    "count_ids",
    "score_reply",
    "tool_cases",
]

SYSTEM_PROMPT = (
    "You answer questions about a table of user IDs (the integers 1 to 1000). "
    "Always answer by calling the count_ids tool with one comparison."
)

COUNT_IDS_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "count_ids",
        "description": "Count the IDs in the table that satisfy one comparison with a value.",
        "parameters": {
            "type": "object",
            "properties": {
                "op": {
                    "type": "string",
                    "enum": ["eq", "ne", "lt", "le", "gt", "ge"],
                    "description": "eq =, ne ≠, lt <, le ≤, gt >, ge ≥",
                },
                "value": {"type": "integer", "description": "the value to compare with"},
            },
            "required": ["op", "value"],
        },
    },
}

# (question template, op, value): every op at least three times, several phrasings each.
_CASES: tuple[tuple[str, str, int], ...] = (
    ("How many IDs are greater than {v}?", "gt", 420),
    ("How many IDs are less than {v}?", "lt", 17),
    ("How many IDs are at least {v}?", "ge", 250),
    ("How many IDs are at most {v}?", "le", 999),
    ("How many IDs are equal to {v}?", "eq", 64),
    ("How many IDs are not equal to {v}?", "ne", 500),
    ("Count the IDs that are more than {v}.", "gt", 875),
    ("Count the IDs that are fewer than {v}.", "lt", 3),
    ("How many IDs are greater than or equal to {v}?", "ge", 730),
    ("How many IDs are less than or equal to {v}?", "le", 128),
    ("How many IDs are exactly {v}?", "eq", 1000),
    ("How many IDs are not equal to {v}?", "ne", 1),
    ("How many IDs are above {v}?", "gt", 99),
    ("How many IDs are below {v}?", "lt", 640),
    ("Please count the IDs at least {v}.", "ge", 12),
    ("Please count the IDs at most {v}.", "le", 333),
    ("How many IDs are equal to {v}, if any?", "eq", 777),
    ("How many IDs in the table are not equal to {v}?", "ne", 256),
    ("How many IDs are greater than {v}?", "gt", 5),
    ("How many IDs are less than {v}?", "lt", 901),
)


@dataclass(frozen=True)
class ToolCase:
    question: str
    op: str
    value: int

    def messages(self) -> list[dict[str, Any]]:
        return [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": self.question},
        ]


@dataclass(frozen=True)
class ToolScore:
    called: bool
    filter_ok: bool
    detail: str  # what was wrong, for the report ("" when right)


def tool_cases(n: int = 20) -> list[ToolCase]:
    """The first `n` (≤ 20) built-in cases, always in the same order."""
    return [ToolCase(q.format(v=v), op, v) for q, op, v in _CASES[:n]]


def count_ids(op: str, value: int, ids: range = range(1, 1001)) -> int:
    """The known answer of a case, over IDs 1..1000."""
    tests = {
        "eq": lambda i: i == value,
        "ne": lambda i: i != value,
        "lt": lambda i: i < value,
        "le": lambda i: i <= value,
        "gt": lambda i: i > value,
        "ge": lambda i: i >= value,
    }
    return sum(1 for i in ids if tests[op](i))


def _as_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value.strip())
    return None


def score_reply(case: ToolCase, response: dict[str, Any]) -> ToolScore:
    """Score one chat completion (OpenAI JSON) against the case's expected call."""
    message = response["choices"][0].get("message") or {}
    calls = [
        c.get("function") or {}
        for c in message.get("tool_calls") or []
        if isinstance(c, dict) and isinstance(c.get("function"), dict)
    ]
    call = next((c for c in calls if c.get("name") == "count_ids"), None)
    if call is None:
        return ToolScore(False, False, "no count_ids call")
    try:
        arguments = orjson.loads(call.get("arguments") or "")
    except orjson.JSONDecodeError:
        return ToolScore(False, False, f"arguments are not JSON: {call.get('arguments')!r}")
    if not isinstance(arguments, dict):
        return ToolScore(False, False, "arguments are not an object")
    got = (arguments.get("op"), _as_int(arguments.get("value")))
    if got != (case.op, case.value):
        return ToolScore(True, False, f"expected {case.op} {case.value}, got {got[0]} {got[1]}")
    return ToolScore(True, True, "")
