"""Backend benchmark client (`igw bench backends`).

Platform teams pick instance types and serving backends before they route anything; this
package measures the candidates (tokens/s, TTFT, cost per million tokens, tool-call
correctness, determinism at temperature 0, run-to-run change, a concurrency sweep).
Named apart from the top-level `bench/` (the routing benchmark harness behind
`make bench`). The capacity preflight that checks where node groups can be placed is the
platform's (`stacks/preflight`), since it reads environments. Modules, one job each:

    spec       BACKENDS.yaml               runner     the measurement passes
    client     OpenAI-compatible HTTP      tasks      the built-in count_ids tool task
    cost       $/h → $ per 10⁶ tokens      stats      median and spread
    results    dataclasses and JSON        report     terminal table, HTML page
    targets    emulated pods for `emulate:` entries

Nothing here imports aws_cdk or boto3.
"""

from __future__ import annotations

from inference_gateway.backend_bench.client import BackendError
from inference_gateway.backend_bench.cost import cost_per_million_tokens
from inference_gateway.backend_bench.results import BackendResult, BenchResult
from inference_gateway.backend_bench.runner import Target, run_benchmark
from inference_gateway.backend_bench.spec import BenchSpec, load_bench_spec, parse_bench_spec

__all__ = [
    "BackendError",
    "BackendResult",
    "BenchResult",
    "BenchSpec",
    "Target",
    "cost_per_million_tokens",
    "load_bench_spec",
    "parse_bench_spec",
    "run_benchmark",
]
