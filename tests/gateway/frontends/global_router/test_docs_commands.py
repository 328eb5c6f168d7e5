"""The `igw` commands the README and docs/global-router.md show exist as written (issue
23, item 9: the README showed `igw global --store redis://…`, an option `igw global`
does not have): every `--flag` of every `igw SUBCOMMAND …` line in their code blocks
and command tables is an option of that subcommand's real parser, and every file of
`examples/fleet/` the docs name exists and parses."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest
import yaml

from inference_gateway.cli.main import build_parser
from inference_gateway.frontends.global_router import load_router_config

ROOT = Path(__file__).resolve().parents[4]
DOCS = [ROOT / "README.md", ROOT / "docs" / "global-router.md"]
SUBCOMMANDS = ("global", "serve", "emulate")


def _options(command: str) -> set[str]:
    parser = build_parser(only=command)
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[
        command
    ]
    return {s for a in sub._actions for s in a.option_strings}


def _commands(text: str) -> list[tuple[str, str]]:
    """(subcommand, the rest of its line) for every `igw <sub> …` the text shows."""
    found = []
    for match in re.finditer(r"igw (global|serve|emulate)\b([^`|\n]*)", text):
        found.append((match.group(1), match.group(2)))
    return found


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_flag_shown_exists(doc: Path) -> None:
    options = {c: _options(c) for c in SUBCOMMANDS}
    shown = _commands(doc.read_text())
    assert any(c == "global" for c, _ in shown)
    unknown = [
        (command, flag)
        for command, rest in shown
        for flag in re.findall(r"(?<![\w-])--[a-z][a-z-]*", rest)
        if flag not in options[command]
    ]
    assert unknown == []


def test_the_example_fleet_the_docs_run_is_there() -> None:
    text = (ROOT / "docs" / "global-router.md").read_text()
    named = set(re.findall(r"examples/fleet/([\w.-]+\.yaml)", text))
    assert {"pods.yaml", "global.yaml", "use1-a-endpoints.yaml"} <= named
    for name in named:
        assert (ROOT / "examples" / "fleet" / name).is_file(), name
    spec = load_router_config(ROOT / "examples" / "fleet" / "global.yaml")
    assert len(spec.clusters) == 3 and len(spec.regions) == 2 and spec.store is not None
    for cluster in spec.clusters:
        endpoints = yaml.safe_load(
            (ROOT / "examples" / "fleet" / f"{cluster.name}-endpoints.yaml").read_text()
        )
        assert [e["name"] for e in endpoints["endpoints"]] == [cluster.name]


def test_the_docs_say_per_what_and_name_the_key_prefix() -> None:
    text = (ROOT / "docs" / "global-router.md").read_text()
    assert "per million generated tokens at capacity" in text
    assert "rateLimits.keyPrefix" in text
