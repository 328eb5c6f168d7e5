"""InferenceModelRewrite: weighted canary splits, precedence, and validation."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from inference_gateway.core.traffic.rewrites import parse_rewrites
from inference_gateway.errors import ConfigError


def rewrite(
    name: str, rules: list[dict[str, Any]], created: str = "2026-01-01T00:00:00Z"
) -> dict[str, Any]:
    return {
        "apiVersion": "inference.networking.x-k8s.io/v1alpha2",
        "kind": "InferenceModelRewrite",
        "metadata": {"name": name, "creationTimestamp": created},
        "spec": {"rules": rules},
    }


def split(model: str, targets: dict[str, int]) -> dict[str, Any]:
    return {
        "matches": [{"model": {"type": "Exact", "value": model}}],
        "targets": [{"modelRewrite": t, "weight": w} for t, w in targets.items()],
    }


KNOWN = {"chat-v1", "chat-v2", "other"}


def test_ninety_ten_split_lands_within_one_point_over_20000_requests() -> None:
    rules = parse_rewrites(
        [rewrite("canary", [split("chat", {"chat-v1": 90, "chat-v2": 10})])],
        known_models=KNOWN,
        seed=20260101,
    )
    counts = Counter(rules.rewrite("chat") for _ in range(20_000))
    assert abs(counts["chat-v2"] / 20_000 - 0.10) <= 0.01
    assert set(counts) == {"chat-v1", "chat-v2"}


def test_exact_match_beats_catch_all_and_older_beats_newer() -> None:
    catch_all = rewrite(
        "all",
        [{"targets": [{"modelRewrite": "other", "weight": 1}]}],
        created="2025-01-01T00:00:00Z",
    )
    newer = rewrite("new", [split("chat", {"chat-v2": 1})], created="2026-06-01T00:00:00Z")
    older = rewrite("old", [split("chat", {"chat-v1": 1})], created="2026-01-01T00:00:00Z")
    rules = parse_rewrites([catch_all, newer, older], known_models=KNOWN, seed=1)
    assert rules.rewrite("chat") == "chat-v1"
    assert rules.rewrite("anything-else") == "other"


@pytest.mark.parametrize(
    ("doc", "field"),
    [
        (rewrite("z", [split("chat", {"chat-v1": 0, "chat-v2": 0})]), "[0].spec.rules[0]"),
        (rewrite("u", [split("chat", {"nope": 1})]), "[0].spec.rules[0].targets[0].modelRewrite"),
        ({"kind": "Other"}, "[0].kind"),
    ],
)
def test_bad_rewrites_are_rejected_with_the_field_path(doc: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError) as error:
        parse_rewrites([doc], known_models=KNOWN)
    assert any(p.startswith(field) for p in error.value.problems), error.value.problems
