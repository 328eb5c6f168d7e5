"""The checks of a config that span its fields without knowing plugins (no name is
declared twice), and pydantic's errors as field paths (`format_validation_error`, which
every config reader of the package uses). The checks that build plugins are the core's
(`core/scheduling/config_checks.py`)."""

from __future__ import annotations

from pydantic import ValidationError

__all__ = ["duplicates", "format_validation_error"]


def duplicates(field: str, names: list[str]) -> list[str]:
    seen: set[str] = set()
    out = []
    for i, name in enumerate(names):
        if name in seen:
            out.append(f"{field}[{i}]: duplicate name {name!r}")
        seen.add(name)
    return out


def format_validation_error(error: ValidationError, prefix: str = "") -> list[str]:
    """Turn pydantic's error into `"a.b[2].c: message"` lines."""
    lines = []
    for item in error.errors():
        path = prefix
        for part in item["loc"]:
            if part == "[key]":  # a mapping's key failed: the key itself is the path
                continue
            if isinstance(part, int):
                path += f"[{part}]"
            else:
                path += f".{part}" if path else str(part)
        message = item["msg"].removeprefix("Value error, ")
        lines.append(f"{path or '<root>'}: {message}")
    return lines
