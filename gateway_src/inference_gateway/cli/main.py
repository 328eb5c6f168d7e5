"""`igw`: the command-line entry point. Each subcommand lives beside the code it drives.

Exit codes: 0 success, 1 runtime failure, 2 bad input (usage, config, scenario). A
command whose Python dependencies this environment lacks (a partial venv, a slim image)
says which package and which pinned requirements file to install, and exits 1: the input
was fine, the installation was not.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from inference_gateway.errors import ConfigError

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
}

#: top-level module → the pinned requirements file that installs it, where that is not
#: requirements/gateway.txt (the gateway's core).
REQUIREMENTS_OF = {
    "kubernetes_asyncio": "requirements/gateway-k8s.txt",
    "tokenizers": "requirements/gateway-k8s.txt",
    "huggingface_hub": "requirements/gateway-k8s.txt",
    "openai": "requirements/dev.txt",
    "mypy": "requirements/native.txt",
    "mypyc": "requirements/native.txt",
}


def missing_dependency(error: ModuleNotFoundError) -> str | None:
    """The third-party module `error` is about, or None when it is one of ours (a bug)."""
    name = (error.name or "").split(".")[0]
    return None if not name or name == __name__.split(".")[0] else name


def _report_missing(command: str, module: str) -> int:
    requirements = REQUIREMENTS_OF.get(module, "requirements/gateway.txt")
    print(
        f"igw {command}: needs the Python package {module!r}, which this environment lacks; "
        f"install it with `pip install -r {requirements}` (pinned), or run `make venv` "
        "in the repository for everything",
        file=sys.stderr,
    )
    return 1


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="igw",
        description="GPU-aware inference gateway: serve, emulate and simulate LLM fleets.",
    )
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
    try:
        return int(args.handler(args) or 0)
    except ModuleNotFoundError as error:  # a lazy import inside the command
        if (missing := missing_dependency(error)) is None:
            raise
        return _report_missing(args.command, missing)
    except ConfigError as error:
        print(f"igw {args.command}: invalid input in {error.source}", file=sys.stderr)
        for problem in error.problems:
            print(f"  {problem}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
