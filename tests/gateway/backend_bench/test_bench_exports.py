"""The backend_bench package's public API, pinned; and its isolation from aws_cdk and boto3."""

from __future__ import annotations

import subprocess
import sys

import inference_gateway.backend_bench as bench


def test_public_api() -> None:
    assert sorted(bench.__all__) == [
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
    for name in bench.__all__:
        assert getattr(bench, name) is not None


def test_bench_imports_neither_aws_cdk_nor_boto3() -> None:
    code = (
        "import sys, inference_gateway.backend_bench, inference_gateway.backend_bench.cli; "
        "print(sorted(m for m in ('aws_cdk', 'boto3', 'botocore') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
