"""`igw bench`: benchmarks, one sub-action each (room for more beside `backends`).

    igw bench backends BACKENDS.yaml [--json PATH|-] [--html PATH] [--runs N]

Exit codes: 0 every backend measured, 1 at least one backend failed (the others are
still measured and reported, each failure with its reason), 2 bad input file.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any

import orjson
from rich.console import Console

from inference_gateway.backend_bench.report import render_html, render_table
from inference_gateway.backend_bench.results import BenchResult
from inference_gateway.backend_bench.runner import run_benchmark
from inference_gateway.backend_bench.spec import BenchSpec, load_bench_spec
from inference_gateway.backend_bench.targets import resolve_targets
from inference_gateway.errors import ConfigError
from inference_gateway.terminal import progress_line

__all__ = ["benchmark_backends", "register"]


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "bench",
        help="benchmark serving backends (`igw bench backends FILE`)",
        description="Benchmarks. `backends`: throughput, TTFT, cost per million tokens, "
        "tool-call correctness and determinism of OpenAI-compatible endpoints.",
    )
    actions = parser.add_subparsers(dest="bench_action", metavar="ACTION", required=True)
    backends = actions.add_parser(
        "backends",
        help="compare OpenAI-compatible backends (see docs/backend-benchmark.md)",
        description="Run the same prompts against every backend of BACKENDS.yaml and "
        "report median tokens/s, TTFT, cost per million output tokens, tool-call "
        "correctness (n/20), distinct outputs at temperature 0 and the run-to-run change.",
    )
    backends.add_argument("file", metavar="BACKENDS.yaml")
    backends.add_argument("--json", metavar="PATH", help="write the JSON result ('-': stdout)")
    backends.add_argument("--html", metavar="PATH", help="write the HTML report")
    backends.add_argument("--runs", type=int, default=None, help="override settings.runs")
    backends.set_defaults(handler=_run_backends)


async def benchmark_backends(
    spec: BenchSpec, *, progress: Any = None, environ: Any = None
) -> BenchResult:
    """Resolve (start emulated pods) and benchmark every backend of `spec`."""
    async with resolve_targets(spec) as targets:
        return await run_benchmark(spec.settings, targets, progress=progress, environ=environ)


def _run_backends(args: argparse.Namespace) -> int:
    spec = load_bench_spec(args.file)
    if args.runs is not None:
        if args.runs < 1:
            raise ConfigError("arguments", ["--runs: must be at least 1"])
        spec = spec.model_copy(
            update={"settings": spec.settings.model_copy(update={"runs": args.runs})}
        )
    to_stdout = args.json == "-"
    console = Console(stderr=to_stdout)  # not a terminal: $COLUMNS, else 80; cells wrap
    result = asyncio.run(benchmark_backends(spec, progress=progress_line))
    document = orjson.dumps(result.to_json(), option=orjson.OPT_INDENT_2)
    if to_stdout:
        sys.stdout.write(document.decode() + "\n")
    elif args.json:
        Path(args.json).write_bytes(document + b"\n")
        console.print(f"JSON written to {args.json}")
    render_table(result, console)
    if args.html:
        Path(args.html).write_text(render_html(result))
        console.print(f"HTML report written to {args.html}")
    return 1 if result.failed else 0
