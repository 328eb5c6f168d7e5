"""How `igw` words what stops a command before it runs: one home for the lines every
command prints (cli/main.py) and `igw validate` prints for a file (cli/validate.py).

    igw serve: cannot listen on 127.0.0.1:8080 (--port 8080): address already in use …
    igw auth: invalid input in --api-keys keys.yaml: cannot read file: No such file …
    igw serve: invalid input in --config bad.yaml          (several problems: one a line)
      models[0].pool: no pool named 'h200'

A problem names its field path; where a flag gave the file or the port, the line names
the flag and its value, so a user knows which argument to change.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable

from inference_gateway.errors import ConfigError, ListenError

__all__ = ["config_error_lines", "flag_values", "listen_error_line"]


def flag_values(parser: argparse.ArgumentParser | None, args: argparse.Namespace) -> list[str]:
    """`--flag value` for every option given a value (positionals are left out)."""
    if parser is None:
        return []
    out = []
    for action in parser._actions:  # argparse keeps no public list of a parser's options
        value = getattr(args, action.dest, None)
        if not action.option_strings or value is None or isinstance(value, bool):
            continue
        values = value if isinstance(value, list) else [value]
        out += [f"{action.option_strings[-1]} {v}" for v in values]
    return out


def _flag_for(text: str, given: Iterable[str], *, port: bool = False) -> str | None:
    """The given `--flag value` whose value is `text` (a port: the value's port)."""
    for pair in given:
        value = pair.split(" ", 1)[1]
        if value == text or (port and value.rpartition(":")[2] == text):
            return pair
    for pair in given:  # a source such as "API key file keys.yaml"
        value = pair.split(" ", 1)[1]
        if not port and len(value) > 1 and text.endswith(value):
            return pair
    return None


def listen_error_line(command: str, error: ListenError, given: Iterable[str] = ()) -> str:
    flag = _flag_for(str(error.port), given, port=True)
    if error.about_host:
        flag = _flag_for(error.host, given) or flag
    where = f"{error.host}:{error.port}" + (f" ({flag})" if flag else "")
    return f"{command}: cannot listen on {where}: {error.reason}"


def config_error_lines(command: str, error: ConfigError, given: Iterable[str] = ()) -> list[str]:
    source = _flag_for(error.source, given) or error.source
    problems = [p.removeprefix("<root>: ") for p in error.problems]
    if len(problems) == 1:
        return [f"{command}: invalid input in {source}: {problems[0]}"]
    return [f"{command}: invalid input in {source}", *(f"  {p}" for p in problems)]
