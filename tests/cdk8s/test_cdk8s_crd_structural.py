"""Every rendered CRD's schema is structural, and the selector union survives pruning.

The rules are Kubernetes' (kubernetes.io, "Extend the Kubernetes API with
CustomResourceDefinitions", section "Specifying a structural schema", and the
apiextensions validation of `JSONSchemaProps`): every node carries a `type` unless it is
`x-kubernetes-int-or-string` or `x-kubernetes-preserve-unknown-fields`; inside
`allOf`/`anyOf`/`oneOf`/`not` no `type`, `description`, `default`, `nullable` or
`additionalProperties`, and every field named there is also named outside; `properties`
and `additionalProperties` exclude each other; no `$ref`; `metadata` restricts only
`name` and `generateName`. The API server refuses a v1 CRD that breaks them.

`pools[].selector` takes a plain map or a LabelSelector. The two cannot share one
structural schema (a typed `anyOf` of a map and an object breaks the junctor rule), so
that field alone keeps unknown fields; without that the API server would prune a plain
map to `{}` on write, and an empty selector selects every pod of the namespace.
"""

from __future__ import annotations

from typing import Any

import pytest

from inference_gateway.config.spec import openapi_v3_schema

JUNCTORS = ("allOf", "anyOf", "oneOf", "not")
NOT_IN_JUNCTORS = ("type", "description", "default", "nullable", "additionalProperties")


def structural_problems(node: dict[str, Any], path: str = "") -> list[str]:
    out: list[str] = []
    where = path or "<root>"
    exempt = node.get("x-kubernetes-int-or-string") or node.get(
        "x-kubernetes-preserve-unknown-fields"
    )
    if not node.get("type") and not exempt:
        out.append(f"{where}: no type")
    if "$ref" in node:
        out.append(f"{where}: $ref")
    if "properties" in node and "additionalProperties" in node:
        out.append(f"{where}: properties and additionalProperties together")
    named = set(node.get("properties", {}))
    for junctor in JUNCTORS:
        branches = node.get(junctor)
        if branches is None:
            continue
        for branch in branches if isinstance(branches, list) else [branches]:
            out += [f"{where}.{junctor}: sets {k}" for k in NOT_IN_JUNCTORS if k in branch]
            out += [
                f"{where}.{junctor}: {k} not named outside"
                for k in branch.get("properties", {})
                if k not in named
            ]
    for name, child in node.get("properties", {}).items():
        if path == ".metadata" and name not in ("name", "generateName"):
            out.append(f"{path}.{name}: metadata restricts only name and generateName")
        out += structural_problems(child, f"{path}.{name}")
    if isinstance(node.get("additionalProperties"), dict):
        out += structural_problems(node["additionalProperties"], f"{path}.*")
    if isinstance(node.get("items"), dict):
        out += structural_problems(node["items"], f"{path}[]")
    return out


def prune(value: Any, schema: dict[str, Any]) -> Any:
    """What the API server stores: fields the schema does not name are dropped, unless
    the node preserves unknown fields (then only the named ones are pruned inside)."""
    if isinstance(value, dict):
        properties = schema.get("properties", {})
        extra = schema.get("additionalProperties")
        out = {}
        for key, item in value.items():
            if key in properties:
                out[key] = prune(item, properties[key])
            elif isinstance(extra, dict):
                out[key] = prune(item, extra)
            elif schema.get("x-kubernetes-preserve-unknown-fields"):
                out[key] = item
        return out
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [prune(item, schema["items"]) for item in value]
    return value


def test_the_checker_catches_what_kubernetes_refuses() -> None:
    """A checker that cannot fail proves nothing: the union spelled as pydantic would
    write it, and the other broken forms, are all caught."""
    union = {
        "type": "object",
        "properties": {
            "s": {
                "anyOf": [
                    {"type": "object", "additionalProperties": {"type": "string"}},
                    {"type": "object", "properties": {"matchLabels": {"type": "object"}}},
                ]
            }
        },
    }
    found = structural_problems(union)
    assert ".s: no type" in found and ".s.anyOf: sets type" in found
    assert ".s.anyOf: matchLabels not named outside" in found
    assert structural_problems(
        {
            "type": "object",
            "properties": {"a": {"type": "string"}},
            "additionalProperties": {"type": "string"},
        }
    ) == ["<root>: properties and additionalProperties together"]
    assert structural_problems({"type": "object", "properties": {"a": {"$ref": "#/x"}}}) == [
        ".a: no type",
        ".a: $ref",
    ]


def test_every_rendered_crd_is_structural(rendered: dict[str, list[dict[str, Any]]]) -> None:
    crds = [
        d for docs in rendered.values() for d in docs if d["kind"] == "CustomResourceDefinition"
    ]
    assert crds
    for crd in crds:
        for version in crd["spec"]["versions"]:
            schema = version["schema"]["openAPIV3Schema"]
            assert structural_problems(schema) == [], crd["metadata"]["name"]


@pytest.fixture(scope="module")
def pool_schema() -> dict[str, Any]:
    return openapi_v3_schema()["properties"]["spec"]["properties"]["pools"]["items"]


def test_the_selector_keeps_unknown_fields_beside_the_typed_full_form(
    pool_schema: dict[str, Any],
) -> None:
    selector = pool_schema["properties"]["selector"]
    assert selector["type"] == "object"
    assert selector["x-kubernetes-preserve-unknown-fields"] is True
    assert set(selector["properties"]) == {"matchLabels", "matchExpressions"}
    requirement = selector["properties"]["matchExpressions"]["items"]
    assert requirement["properties"]["operator"]["enum"] == [
        "In",
        "NotIn",
        "Exists",
        "DoesNotExist",
    ]


@pytest.mark.parametrize(
    "selector",
    [
        {"app": "vllm", "igw.dev/pool": "chat"},
        {
            "matchLabels": {"app": "vllm"},
            "matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["canary"]}],
        },
    ],
)
def test_both_spellings_survive_pruning(pool_schema: dict[str, Any], selector: dict) -> None:
    pool = {"name": "chat", "selector": selector}
    assert prune(pool, pool_schema) == pool
    without = {**pool_schema["properties"]["selector"]}
    without.pop("x-kubernetes-preserve-unknown-fields")
    schema = {**pool_schema, "properties": {**pool_schema["properties"], "selector": without}}
    if "matchLabels" not in selector:  # the reason for the flag: a plain map would vanish
        assert prune(pool, schema)["selector"] == {}


def test_weights_are_named_properties_so_unknown_names_are_not_kept() -> None:
    weights = openapi_v3_schema()["properties"]["spec"]["properties"]["weights"]
    assert "x-kubernetes-preserve-unknown-fields" not in weights
    assert {"queue", "kvCache", "prefix-cache-scorer"} <= set(weights["properties"])
    assert all(v == {"type": "number", "minimum": 0} for v in weights["properties"].values())
