"""vLLM v0.11.0's `vllm serve` command line, parsed as vLLM parses it.

The options are data (`vllm_serve_args.yaml`: every flag vLLM v0.11.0 accepts, its type,
choices, nargs and default, with the source files named); this module only turns that
data into an `argparse` parser and adds what vLLM's own parser class does around argparse
(`FlexibleArgumentParser.parse_args`, vllm/utils/__init__.py):

* `serve --model X` is a `ValueError` (the model is positional with `vllm serve`);
* `--config FILE.yaml` splices the file's keys in after the model (the command line wins);
* option names take `_` for `-` (`--max_model_len`); `-O3` / `-O 3` mean
  `--compilation-config '{"level": 3}'`;
* `--json-arg.key value` (and `key+` for list items) build a JSON object argument.

Errors come out as vLLM's do: argparse's usage line and `error:` message with exit code 2
for an unknown flag or a bad value, `ValueError` / `TypeError` raised for what vLLM raises
(a traceback and exit 1 at the command line). Value types (`human_int`, `optional`,
`config:NAME`, ...) are described in the data file's header; the functions carry vLLM's
names (`human_readable_int`, `_optional_type`, ...) because argparse prints a type's
`__name__` in "invalid ... value" messages.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import re
import sys
import uuid
from collections.abc import Callable, Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any, Literal, NamedTuple

import yaml
from pydantic import ConfigDict, TypeAdapter, ValidationError
from pydantic.dataclasses import dataclass as pydantic_dataclass

__all__ = [
    "LoRAModule",
    "ServeArgs",
    "build_parser",
    "option_default",
    "option_table",
    "parse_serve_args",
    "serve_data",
    "validate_serve_args",
]

DATA_FILE = "vllm_serve_args.yaml"


class LoRAModule(NamedTuple):
    """One `--lora-modules` entry (vLLM's `LoRAModulePath`)."""

    name: str
    path: str
    base_model_name: str | None = None


class ServeArgs(NamedTuple):
    """The subcommand vLLM would run and its parsed options (argparse's namespace)."""

    subcommand: str | None
    options: argparse.Namespace


@functools.cache
def serve_data() -> dict[str, Any]:
    """The transcription (`vllm_serve_args.yaml`), loaded once."""
    text = resources.files(__package__).joinpath(DATA_FILE).read_text()
    data: dict[str, Any] = yaml.safe_load(text)
    return data


def option_table() -> list[dict[str, Any]]:
    """Every option of `vllm serve` in vLLM's order, each with its `dest` filled in."""
    table = []
    for section in serve_data()["sections"]:
        for entry in section["options"]:
            table.append({"group": section["group"], "dest": _dest(entry), **entry})
    return table


def option_default(entry: Mapping[str, Any]) -> Any:
    """An option's default as argparse holds it (store_true: False, else None unless
    the data says)."""
    return entry.get("default", False if entry.get("action") == "store_true" else None)


def _dest(entry: Mapping[str, Any]) -> str:
    if "dest" in entry:
        return str(entry["dest"])
    if "positional" in entry:
        return str(entry["positional"])
    flags: list[str] = entry["flags"]
    first_long = next((f for f in flags if f.startswith("--")), flags[0])
    return first_long.lstrip("-").replace("-", "_")


# --------------------------------------------------------------------------- value types
# Named as vLLM names them (vllm/engine/arg_utils.py): argparse prints `type.__name__`.


def human_readable_int(value: str) -> int:
    """`1k` = 1,000, `1K` = 1,024 (decimals only with decimal suffixes), else an int."""
    value = value.strip()
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([kKmMgGtT])", value)
    if match:
        number, suffix = match.groups()
        decimal = {"k": 10**3, "m": 10**6, "g": 10**9}
        binary = {"K": 2**10, "M": 2**20, "G": 2**30}
        if suffix in decimal:
            return int(float(number) * decimal[suffix])
        if suffix in binary:
            if not number.isdigit():
                raise argparse.ArgumentTypeError(
                    f"Decimals are not allowed with binary suffixes like {suffix}. "
                    f"Did you mean to use {number}{suffix.lower()} instead?"
                )
            return int(number) * binary[suffix]
    return int(value)  # 't'/'T' have no multiplier in vLLM either: a ValueError


def _parse_type(convert: Callable[[str], Any]) -> Callable[[str], Any]:
    def _parse_type(val: str) -> Any:
        try:
            return convert(val)
        except ValueError as error:
            raise argparse.ArgumentTypeError(
                f"Value {val} cannot be converted to {convert}."
            ) from error

    return _parse_type


def _optional_type(convert: Callable[[str], Any]) -> Callable[[str], Any]:
    checked = _parse_type(convert)

    def _optional_type(val: str) -> Any:
        return None if val in ("", "None") else checked(val)

    return _optional_type


def union_dict_and_str(val: str) -> Any:
    """A JSON object when the text looks like one, else the text itself."""
    if not re.match(r"(?s)^\s*{.*}\s*$", val):
        return str(val)
    return _optional_type(json.loads)(val)


_NAMED_TYPES: dict[str, Callable[[str], Any]] = {
    "str": str,
    "int": int,
    "float": float,
    "bool": bool,
    "human_int": human_readable_int,
    "json": json.loads,
    "json_checked": _parse_type(json.loads),
    "json_or_str": union_dict_and_str,
}

_FIELD_TYPES: dict[str, Any] = {
    "bool": bool,
    "int": int,
    "float": float,
    "str": str,
    "dict": dict[str, Any],
}


@functools.cache
def _config_adapter(name: str) -> TypeAdapter[Any]:
    """A validator for vLLM's config dataclass `name`, rebuilt from its transcribed fields
    as a pydantic dataclass like vLLM's (lax types, unknown keys ignored, `requires` as
    its `__post_init__`), so errors read as vLLM's; any JSON object where the data file
    does not transcribe the class."""
    spec = serve_data()["configs"].get(name)
    if spec is None:
        return TypeAdapter(dict[str, Any])
    fields: list[tuple[str, Any, Any]] = []
    for field, rule in spec["fields"].items():
        kind = rule["type"]
        if isinstance(kind, list):
            annotation: Any = Literal[tuple(kind)]
            nullable = bool(rule.get("nullable"))
        else:
            base, _, null = kind.partition("|")
            annotation, nullable = _FIELD_TYPES[base.strip()], null.strip() == "null"
        default = rule.get("default")
        value = dataclasses.field(default_factory=dict) if default == {} else default
        fields.append((field, annotation | None if nullable else annotation, value))
    requires, uuids = spec.get("requires", []), spec.get("uuid_when_null", [])

    def __post_init__(self: Any) -> None:
        for name in uuids:
            if getattr(self, name) is None:
                setattr(self, name, str(uuid.uuid4()))
        for rule in requires:
            if getattr(self, rule["if_set"]) is not None and getattr(self, rule["then"]) is None:
                raise ValueError(rule["message"])

    cls = dataclasses.make_dataclass(name, fields, namespace={"__post_init__": __post_init__})
    return TypeAdapter(pydantic_dataclass(cls, config=ConfigDict(extra="ignore")))


def _parse_config(name: str) -> Callable[[str], Any]:
    adapter = _config_adapter(name)

    def parse_dataclass(val: str) -> dict[str, Any]:
        try:
            value = adapter.validate_json(val)
        except ValidationError as error:
            raise argparse.ArgumentTypeError(repr(error)) from error
        return value if isinstance(value, dict) else dataclasses.asdict(value)

    return parse_dataclass


def _value_type(entry: Mapping[str, Any]) -> Callable[[str], Any] | None:
    kind = entry.get("type")
    if kind is None:
        return None
    convert = _parse_config(kind[7:]) if kind.startswith("config:") else _NAMED_TYPES[kind]
    return _optional_type(convert) if entry.get("optional") else convert


class _LoRAModulesAction(argparse.Action):
    """`--lora-modules name=path ...` or JSON objects `{"name", "path",
    "base_model_name"}` (cli_args.py LoRAParserAction): a malformed entry is a parser
    error, except `a=b=c`, which vLLM lets through to a ValueError."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        if isinstance(values, str):
            raise TypeError("Expected values to be a list")
        modules: list[LoRAModule] = []
        for item in values or []:
            if item in (None, ""):
                continue
            if "=" in item and "," not in item:
                name, path = item.split("=")  # ValueError on a second '=', as in vLLM
                modules.append(LoRAModule(name, path))
                continue
            try:
                fields = json.loads(item)
                modules.append(_lora_from_json(fields))
            except json.JSONDecodeError:
                parser.error(f"Invalid JSON format for --lora-modules: {item}")
            except TypeError as error:
                parser.error(f"Invalid fields for --lora-modules: {item} - {error}")
        setattr(namespace, self.dest, modules)


def _lora_from_json(fields: Any) -> LoRAModule:
    if not isinstance(fields, dict):
        raise TypeError("argument after ** must be a mapping")
    unknown = sorted(set(fields) - set(LoRAModule._fields))
    if unknown:
        raise TypeError(
            f"LoRAModulePath.__init__() got an unexpected keyword argument {unknown[0]!r}"
        )
    missing = [f for f in ("name", "path") if f not in fields]
    if missing:
        raise TypeError(f"LoRAModulePath.__init__() missing required argument: {missing[0]!r}")
    return LoRAModule(**fields)


_ACTIONS: dict[str, Any] = {
    "bool": argparse.BooleanOptionalAction,
    "store_true": "store_true",
    "append": "append",
    "lora_modules": _LoRAModulesAction,
}


def _add_option(group: Any, entry: Mapping[str, Any]) -> argparse.Action:
    kwargs: dict[str, Any] = {}
    action = entry.get("action")
    if action is not None:
        kwargs["action"] = _ACTIONS[action]
    value_type = _value_type(entry)
    if value_type is not None and action != "store_true":
        kwargs["type"] = value_type
    for key in ("nargs", "const", "choices"):
        if key in entry:
            kwargs[key] = entry[key]
    kwargs["default"] = option_default(entry)
    if "positional" in entry:
        return group.add_argument(entry["positional"], **kwargs)  # type: ignore[no-any-return]
    if "dest" in entry:
        kwargs["dest"] = entry["dest"]
    return group.add_argument(*entry["flags"], **kwargs)  # type: ignore[no-any-return]


class _VllmParser(argparse.ArgumentParser):
    """argparse with vLLM's pre-processing of the command line (FlexibleArgumentParser)."""

    def parse_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> argparse.Namespace:
        argv = list(sys.argv[1:] if args is None else args)
        if argv and argv[0] == "serve" and "--model" in argv:
            raise ValueError(
                "With `vllm serve`, you should provide the model as a positional argument "
                "or in a config file instead of via the `--model` option."
            )
        if "--config" in argv:
            argv = _splice_config_file(argv, self)
        return super().parse_args(_json_keys(_flag_names(argv)), namespace)


def _flag_names(argv: list[str]) -> list[str]:
    """`_` in a flag's name (up to its first `.`) reads as `-`; `-O3` as `-O.level=3`."""
    out: list[str] = []
    for index, arg in enumerate(argv):
        if arg.startswith("--help="):
            out.append("--help")
        elif arg.startswith("--"):
            key, eq, value = arg.partition("=")
            head, dot, tail = key[2:].partition(".")
            out.append(f"--{head.replace('_', '-')}{dot}{tail}{eq}{value}")
        elif arg.startswith("-O") and arg != "-O" and arg[2] != ".":
            out.append(f"-O.level={arg[3:] if arg[2] == '=' else arg[2:]}")
        elif arg == "-O" and index + 1 < len(argv) and argv[index + 1] in {"0", "1", "2", "3"}:
            out.append("-O.level")
        else:
            out.append(arg)
    return out


def _json_keys(argv: list[str]) -> list[str]:
    """`--arg.key value` / `--arg.key=value` / `--arg.list+ a,b` into `--arg '{...}'`,
    merged per argument and appended at the end, as vLLM does."""
    skip: set[int] = set()
    merged: dict[str, dict[str, Any]] = {}
    for index, arg in enumerate(argv):
        if index in skip or not (arg.startswith("-") and "." in arg):
            continue
        if "=" in arg:
            arg, value_text = arg.split("=", 1)
            if "." not in arg:  # the dot was in the value
                continue
        else:
            value_text = argv[index + 1]  # an IndexError when missing, as in vLLM
            skip.add(index + 1)
        if arg.endswith("+"):
            arg, value_text = arg[:-1], json.dumps(value_text.split(","))
        key, *path = arg.split(".")
        try:
            value: Any = json.loads(value_text)
        except json.JSONDecodeError:
            value = value_text
        for part in reversed(path):
            value = {part: value}
        _merge(merged.setdefault(key, {}), value)
        skip.add(index)
    out = [a for i, a in enumerate(argv) if i not in skip]
    for key, value in merged.items():
        out += [key, json.dumps(value)]
    return out


def _merge(into: dict[str, Any], update: Mapping[str, Any]) -> None:
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        elif isinstance(value, list) and isinstance(into.get(key), list):
            into[key] += value
        else:
            into[key] = value


def _splice_config_file(argv: list[str], parser: argparse.ArgumentParser) -> list[str]:
    """`--config FILE.yaml`: its keys go after the subcommand and the model, so the
    command line overrides the file (FlexibleArgumentParser._pull_args_from_config)."""
    if argv.count("--config") > 1:
        raise ValueError("More than one config file specified!")
    index = argv.index("--config")
    if index == len(argv) - 1:
        raise ValueError("No config file specified! Please check your command-line arguments.")
    path = argv[index + 1]
    extension = path.split(".")[-1]
    if extension not in ("yaml", "yml"):  # vLLM's message, its two arguments unformatted
        raise ValueError(
            "Config file must be of a yaml/yml type.                              %s supplied",
            extension,
        )
    with open(path) as handle:
        config = yaml.safe_load(handle) or {}
    spliced: list[str] = []
    for key, value in config.items():
        if isinstance(value, bool):
            spliced += [f"--{key}"] if value else []
        elif isinstance(value, list):
            spliced += [f"--{key}", *map(str, value)] if value else []
        else:
            spliced += [f"--{key}", str(value)]
    rest = argv[:index] + argv[index + 2 :]
    if rest and rest[0].startswith("-"):
        return spliced + rest
    if rest and rest[0] == "serve":
        model_in_cli = len(rest) > 1 and not rest[1].startswith("-")
        if not model_in_cli and "--model" not in spliced:
            raise ValueError(
                "No model specified! Please specify model either as a positional argument "
                "or in a config file."
            )
        head = rest[:2] if model_in_cli else rest[:1]
        return head + spliced + rest[len(head) :]
    return rest[:1] + spliced + rest[1:]


def build_parser() -> argparse.ArgumentParser:
    """The `vllm` parser: `-v/--version` and the subcommands, `serve` with every option."""
    data = serve_data()
    parser = _VllmParser(prog=data["prog"], description="vLLM CLI")
    parser.add_argument("-v", "--version", action="version", version=data["version"])
    subparsers = parser.add_subparsers(required=False, dest="subparser")
    for name in data["subcommands"]:
        if name != "serve":
            subparsers.add_parser(name)
            continue
        serve = subparsers.add_parser(name, usage=data["usage"])
        groups: dict[str | None, Any] = {None: serve}
        for section in data["sections"]:
            title = section["group"]
            if title not in groups:
                groups[title] = serve.add_argument_group(title=title)
            for entry in section["options"]:
                _add_option(groups[title], entry)
    return parser


def parse_serve_args(argv: Sequence[str]) -> ServeArgs:
    """Parse a `vllm ...` command line (without the program name) as vLLM v0.11.0 does;
    argparse errors exit 2, and vLLM's own `ValueError`s propagate."""
    options = build_parser().parse_args(list(argv))
    _warn_deprecated(options)
    return ServeArgs(options.subparser, options)


def _warn_deprecated(options: argparse.Namespace) -> None:
    for entry in option_table():
        dest = entry["dest"]
        if entry.get("deprecated") and getattr(options, dest, None) != option_default(entry):
            print(f"WARNING argument '{dest}' is deprecated", file=sys.stderr)


def validate_serve_args(options: argparse.Namespace) -> None:
    """vLLM's checks right after parsing (cli_args.py validate_parsed_serve_args, with
    chat_utils.py validate_chat_template)."""
    template = options.chat_template
    looks_like_path = template is not None and not any(c in template for c in "{}\n")
    if looks_like_path and not Path(template).exists():
        raise ValueError(
            f"The supplied chat template string ({template}) appears path-like, but doesn't exist!"
        )
    if options.enable_auto_tool_choice and not options.tool_call_parser:
        raise TypeError("Error: --enable-auto-tool-choice requires --tool-call-parser")
    if options.enable_log_outputs and not options.enable_log_requests:
        raise TypeError("Error: --enable-log-outputs requires --enable-log-requests")
