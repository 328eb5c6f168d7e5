"""The few JSON Patch operations (RFC 6902: `add`, `remove`, `replace`, JSON Pointer
paths) a conversion records about what the other shape could not carry.

`diff(source, target)` is the patch that turns `source` into `target`: mappings are
compared key by key, lists of equal length element by element, and a list of named
entries that `target` extends at its end element by element plus the new ones (so a
path names the one field, `/gateway/models/1/profile`); anything else is replaced whole. `apply(doc,
patch)` plays such a patch on a copy, and refuses one it cannot play with the step
that failed, since a patch read from a resource's annotation is input like any other.
A null value is a value here, unlike in a JSON merge patch, so an explicit `null` in a
config survives a round trip.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from inference_gateway.errors import InferenceGatewayError

__all__ = ["PatchError", "apply", "diff", "field_path"]

Op = dict[str, Any]


class PatchError(InferenceGatewayError):
    """A patch step that does not apply (its message names the step)."""


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def _unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def diff(source: Any, target: Any, path: str = "") -> list[Op]:
    """The operations that turn `source` into `target` (both JSON-like)."""
    if isinstance(source, Mapping) and isinstance(target, Mapping):
        ops: list[Op] = []
        for key in source:
            if key not in target:
                ops.append({"op": "remove", "path": f"{path}/{_escape(str(key))}"})
        for key, value in target.items():
            where = f"{path}/{_escape(str(key))}"
            if key not in source:
                ops.append({"op": "add", "path": where, "value": copy.deepcopy(value)})
            else:
                ops += diff(source[key], value, where)
        return ops
    if isinstance(source, list) and isinstance(target, list) and _aligned(source, target):
        ops = [
            op
            for i, (a, b) in enumerate(zip(source, target, strict=False))
            for op in diff(a, b, f"{path}/{i}")
        ]
        ops += [
            {"op": "add", "path": f"{path}/{i}", "value": copy.deepcopy(target[i])}
            for i in range(len(source), len(target))
        ]
        return ops
    if type(source) is type(target) and source == target:
        return []
    return [{"op": "replace", "path": path, "value": copy.deepcopy(target)}]


def _identity(item: Any) -> Any:
    """What makes a list element the same element: a mapping's `name`, else nothing."""
    return item.get("name") if isinstance(item, Mapping) else None


def _aligned(source: list[Any], target: list[Any]) -> bool:
    """Whether `target` is `source` element by element, maybe with more at its end (a
    list of named entries whose names agree, or any lists of equal length), so a patch
    can name fields inside the elements instead of replacing the list."""
    if len(source) == len(target):
        return True
    return len(source) < len(target) and all(
        _identity(a) is not None and _identity(a) == _identity(b)
        for a, b in zip(source, target, strict=False)
    )


def _tokens(path: Any) -> list[str]:
    if not isinstance(path, str) or (path and not path.startswith("/")):
        raise PatchError(f"path {path!r} is not a JSON Pointer")
    return [_unescape(t) for t in path.split("/")[1:]] if path else []


def _child(node: Any, token: str, path: str) -> Any:
    if isinstance(node, dict) and token in node:
        return node[token]
    if isinstance(node, list) and token.isdigit() and int(token) < len(node):
        return node[int(token)]
    raise PatchError(f"{path}: no such field")


def apply(doc: Any, patch: Any) -> Any:
    """`doc` with `patch` applied (a new object; `doc` is left alone)."""
    if not isinstance(patch, list):
        raise PatchError("a patch is a list of operations")
    out = copy.deepcopy(doc)
    for i, op in enumerate(patch):
        if not isinstance(op, Mapping) or op.get("op") not in ("add", "remove", "replace"):
            raise PatchError(f"[{i}]: an operation is {{op: add|remove|replace, path, value}}")
        tokens = _tokens(op.get("path"))
        if op["op"] != "remove" and "value" not in op:
            raise PatchError(f"[{i}]: {op['op']} needs a value")
        value = copy.deepcopy(op.get("value"))
        if not tokens:
            if op["op"] == "remove":
                raise PatchError(f"[{i}]: cannot remove the whole document")
            out = value
            continue
        parent = out
        for depth, token in enumerate(tokens[:-1]):
            parent = _child(parent, token, "/" + "/".join(tokens[: depth + 1]))
        last = tokens[-1]
        if isinstance(parent, dict):
            if op["op"] != "add" and last not in parent:
                raise PatchError(f"[{i}] {op['path']}: no such field")
            if op["op"] == "remove":
                del parent[last]
            else:
                parent[last] = value
        elif isinstance(parent, list) and (last.isdigit() or last == "-"):
            index = len(parent) if last == "-" else int(last)
            if index > len(parent) or (op["op"] != "add" and index == len(parent)):
                raise PatchError(f"[{i}] {op['path']}: no such element")
            if op["op"] == "remove":
                del parent[index]
            elif op["op"] == "replace":
                parent[index] = value
            else:
                parent.insert(index, value)
        else:
            raise PatchError(f"[{i}] {op['path']}: the parent is not a mapping or a list")
    return out


def field_path(pointer: str) -> str:
    """A JSON Pointer as this project writes field paths: `/a/b/1/c` → `a.b[1].c`."""
    out = ""
    for token in _tokens(pointer):
        if token.isdigit():
            out += f"[{token}]"
        else:
            out += f".{token}" if out else token
    return out or "<root>"
