"""Every refusal's words in one file (core/request/refusals.py): what the front ends
render, byte for byte (tests/e2e/test_refusal_parity.py compares them on the wire)."""

from __future__ import annotations

import ast
from pathlib import Path

import orjson

from inference_gateway.core.request import refusals

PACKAGE = Path(__file__).resolve().parents[4] / "gateway_src" / "inference_gateway"


def test_a_refusal_is_openais_shape_with_its_headers() -> None:
    refusal = refusals.rate_limited("m", 7, {"x-ratelimit-limit-requests": "3"})
    assert orjson.loads(refusal.body()) == {
        "error": {
            "message": "Rate limit reached for `m`; retry after 7 s.",
            "type": "rate_limit_exceeded",
            "param": None,
            "code": "rate_limited",
        }
    }
    assert refusal.headers == {"x-ratelimit-limit-requests": "3", "retry-after": "7"}


def test_one_404_text_for_an_unknown_and_a_forbidden_model() -> None:
    """OpenAI's words, a long name cut so a refusal never echoes a client's bytes at length."""
    refusal = refusals.model_not_found("m" * 5000)
    assert refusal.status == 404 and refusal.code == "model_not_found"
    assert refusal.message == (
        f"The model `{'m' * refusals.ECHO_CHARS}` does not exist or you do not have access to it."
    )


def test_a_field_refusal_names_the_field() -> None:
    refusal = refusals.invalid_value("n", "an integer from 1 to 128, got 0")
    assert (refusal.status, refusal.param, refusal.message) == (
        400,
        "n",
        "`n` must be an integer from 1 to 128, got 0.",
    )


def _builds_a_rejection(path: Path) -> bool:
    return any(
        isinstance(node, ast.Call)
        and getattr(node.func, "id", getattr(node.func, "attr", None)) == "Rejection"
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
    )


def test_only_the_refusals_module_words_a_rejection() -> None:
    builders = [
        str(path.relative_to(PACKAGE))
        for path in sorted(PACKAGE.rglob("*.py"))
        if _builds_a_rejection(path)
    ]
    assert builders == ["core/request/refusals.py"]
