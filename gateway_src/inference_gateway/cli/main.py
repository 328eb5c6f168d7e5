"""`igw`: the command-line entry point. Each subcommand lives beside the code it drives.

Exit codes: 0 success, 1 runtime failure, 2 bad input (usage, config, scenario). A
command whose Python dependencies this environment lacks (a partial venv, a slim image)
says which package and which pinned requirements file to install, and exits 1: the input
was fine, the installation was not.

Whatever stops a command before it runs is one line on stderr, never a traceback
(cli/messages.py words them): a bad flag (exit 2, argparse's message without the usage
block: `igw CMD --help` has it), a bad file (exit 2, the flag and the field paths), a
port a server cannot bind (exit 1, the flag and the port; transport/listen.py).
"""

from __future__ import annotations

import argparse
import importlib
import sys
import typing
from collections.abc import Sequence

from inference_gateway.cli.messages import (
    config_error_lines,
    flag_values,
    listen_error_line,
)
from inference_gateway.errors import ConfigError, ListenError

# subcommand → module that defines `register(subparsers)`; imported lazily so that
# `igw simulate` does not pay for aiohttp or grpc imports, and vice versa.
SUBCOMMANDS = {
    "emulate": "inference_gateway.emulator.cli",
    "simulate": "inference_gateway.sim.cli",
    "tune": "inference_gateway.sim.tune",
    "what-if": "inference_gateway.sim.whatif",
    "serve": "inference_gateway.cli.serve",
    "global": "inference_gateway.cli.global_router",
    "picker": "inference_gateway.cli.picker",
    "bbr": "inference_gateway.cli.bbr",
    "auth": "inference_gateway.cli.auth",
    "pd-sidecar": "inference_gateway.cli.pd_sidecar",
    "tokenizer": "inference_gateway.cli.tokenizer",
    "demo": "inference_gateway.demo.run",
    "bench": "inference_gateway.backend_bench.cli",
    "validate": "inference_gateway.cli.validate",
    "explain": "inference_gateway.cli.explain",
    "convert": "inference_gateway.cli.convert",
}

#: top-level module → the pinned requirements file that installs it, where that is not
#: gateway_src/requirements.lock (everything the image ships).
REQUIREMENTS_OF = {
    "openai": "requirements/dev.txt",
    "mypy": "requirements/native.txt",
    "mypyc": "requirements/native.txt",
}


def missing_dependency(error: ModuleNotFoundError) -> str | None:
    """The third-party module `error` is about, or None when it is one of ours (a bug)."""
    name = (error.name or "").split(".")[0]
    return None if not name or name == __name__.split(".")[0] else name


def _report_missing(command: str, module: str) -> int:
    requirements = REQUIREMENTS_OF.get(module, "gateway_src/requirements.lock")
    print(
        f"igw {command}: needs the Python package {module!r}, which this environment lacks; "
        f"install it with `pip install -r {requirements}` (pinned), or run `make venv` "
        "in the repository for everything",
        file=sys.stderr,
    )
    return 1


class _Parser(argparse.ArgumentParser):
    """argparse, with a usage error on one line (the usage block is `--help`'s)."""

    def error(self, message: str) -> typing.NoReturn:
        self.exit(2, f"{self.prog}: {message} (see `{self.prog} --help`)\n")


class _Version(argparse.Action):
    """`igw --version`: printed lazily, so the git lookup costs nothing otherwise."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: typing.Any) -> None:
        super().__init__(option_strings, dest, nargs=0, help="print the version and exit")

    def __call__(self, parser: argparse.ArgumentParser, *_: typing.Any) -> None:
        from inference_gateway.versions import describe

        print(describe())  # stdout, as argparse's own version action
        parser.exit(0)


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    parser = _Parser(
        prog="igw",
        description="GPU-aware inference gateway: serve, emulate and simulate LLM fleets.",
    )
    parser.add_argument("--version", action=_Version)
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, module in SUBCOMMANDS.items():
        if only is not None and name != only:
            subparsers.add_parser(name, help=f"see `igw {name} --help`")
            continue
        try:
            importlib.import_module(module).register(subparsers)
        except ModuleNotFoundError as error:
            if (missing := missing_dependency(error)) is None:
                raise
            subparsers.add_parser(name, help=f"unavailable here: needs the package {missing!r}")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = next((a for a in argv if not a.startswith("-")), None)
    if command in SUBCOMMANDS:
        try:
            importlib.import_module(SUBCOMMANDS[command])
        except ModuleNotFoundError as error:
            if (missing := missing_dependency(error)) is None:
                raise
            return _report_missing(command, missing)
    parser = build_parser(command if command in SUBCOMMANDS else None)
    args = parser.parse_args(argv)
    name = f"igw {args.command}"
    try:
        return int(args.handler(args) or 0)
    except ModuleNotFoundError as error:  # a lazy import inside the command
        if (missing := missing_dependency(error)) is None:
            raise
        return _report_missing(args.command, missing)
    except ConfigError as error:
        given = flag_values(_subparser(parser, args.command), args)
        print("\n".join(config_error_lines(name, error, given)), file=sys.stderr)
        return 2
    except ListenError as error:
        given = flag_values(_subparser(parser, args.command), args)
        print(listen_error_line(name, error, given), file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


def _subparser(parser: argparse.ArgumentParser, command: str) -> argparse.ArgumentParser | None:
    for action in parser._actions:  # argparse keeps no public handle on its subparsers
        if isinstance(action, argparse._SubParsersAction):
            found = action.choices.get(command)
            return found if isinstance(found, argparse.ArgumentParser) else None
    return None


if __name__ == "__main__":
    sys.exit(main())
