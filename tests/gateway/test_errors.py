"""One error tree: every public exception class of the package descends from
`InferenceGatewayError`, and `errors.py`'s drawing lists each one under its real parent.

The package is walked module by module (every module imported, `__main__` excepted),
so a new public error anywhere fails here until it joins the tree and the drawing.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re

import inference_gateway
from inference_gateway import errors
from inference_gateway.errors import InferenceGatewayError


def public_exceptions() -> dict[str, type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    for info in pkgutil.walk_packages(inference_gateway.__path__, "inference_gateway."):
        if info.name.endswith("__main__"):  # running it would start the CLI
            continue
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            if (
                inspect.isclass(value)
                and issubclass(value, BaseException)
                and value.__module__ == module.__name__
                and not name.startswith("_")
            ):
                assert name not in found, f"two public errors named {name}"
                found[name] = value
    return found


def drawn_tree() -> dict[str, str | None]:
    """name → parent, read from the box drawing in errors.py's docstring."""
    doc = errors.__doc__ or ""
    lines = doc.split("\n\n")[1].splitlines()
    root = lines[0].strip()
    tree: dict[str, str | None] = {root: None}
    stack: list[tuple[int, str]] = [(-1, root)]
    for line in lines[1:]:
        match = re.search(r"[├└]── (\w+)", line)
        if match is None:
            continue  # a continuation of the previous entry's note
        depth = match.start()
        while stack[-1][0] >= depth:
            stack.pop()
        tree[match.group(1)] = stack[-1][1]
        stack.append((depth, match.group(1)))
    return tree


def test_every_public_error_descends_from_the_root() -> None:
    outside = [
        f"{cls.__module__}.{name}"
        for name, cls in public_exceptions().items()
        if not issubclass(cls, InferenceGatewayError)
    ]
    assert outside == []


def test_the_drawing_lists_every_public_error_under_its_parent() -> None:
    found = public_exceptions()
    tree = drawn_tree()
    assert tree["InferenceGatewayError"] is None
    assert sorted(tree) == sorted(found), "the drawing and the package differ"
    for name, parent in tree.items():
        if parent is not None:
            assert found[name].__bases__[0] is found[parent], f"{name} is drawn under {parent}"


def test_the_walk_sees_errors_outside_errors_py() -> None:
    found = public_exceptions()
    assert {"Rejection", "QueueTimeoutError", "StoreUnavailable", "WatchExpired"} <= set(found)
    assert found["Rejection"].__module__ == "inference_gateway.core.request.refusals"


def test_the_drawing_is_read_as_a_tree() -> None:
    tree = drawn_tree()
    assert tree["UpstreamTimeout"] == "UpstreamError"
    assert tree["BackendError"] == "InferenceGatewayError"
