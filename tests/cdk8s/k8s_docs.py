"""Helpers for the chart tests: pick objects out of synthesised output."""

from __future__ import annotations

from typing import Any

Doc = dict[str, Any]


def find(docs: list[Doc], kind: str, name: str | None = None) -> list[Doc]:
    return [
        d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)
    ]


def one(docs: list[Doc], kind: str, name: str | None = None) -> Doc:
    found = find(docs, kind, name)
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def pod_spec(deployment: Doc) -> Doc:
    return deployment["spec"]["template"]["spec"]
