"""`igw bench backends` against emulated backends on loopback, good and bad (the command
of docs/backend-benchmark.md, on a shorter backends file).

Three emulated H100 pods — a correct one, one that answers tool calls with a wrong value,
one whose temperature-0 output varies — plus three that cannot be benchmarked: nothing
listening, a server that answers HTML instead of OpenAI JSON, and an API key variable
that is not set. Every failure is reported for its backend with a clear reason, and the
scores of the working backends show their faults. Loopback only; small settings so the
whole file stays within a few seconds.
"""

from __future__ import annotations

import json
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import yaml
from aiohttp import web

from inference_gateway.backend_bench.runner import Target, run_benchmark
from inference_gateway.backend_bench.spec import BackendSpec, BenchSettings
from inference_gateway.cli.main import main
from inference_gateway.emulator.fleet import EmulatedFleet

SETTINGS = BenchSettings.model_validate(
    {
        "runs": 2,
        "throughput": {"max_tokens": 8, "repeats": 2},
        "concurrency": [1, 2],
        "tool_calls": {"cases": 20, "concurrency": 10},
        "determinism": {"repeats": 4, "max_tokens": 4},
        "timeout_s": 10,
    }
)

FLEET = {
    "base_port": 0,
    "pods": [
        {"name": "good", "gpu": "H100", "model": "llama-3.1-8b"},
        {"name": "wrong-tools", "gpu": "H100", "model": "llama-3.1-8b",
         "behavior": {"tool_call_error_rate": 0.3, "tool_call_miss_rate": 0.1, "seed": 1}},
        {"name": "jittery", "gpu": "H100", "model": "llama-3.1-8b",
         "behavior": {"temperature0_jitter": 1.0}},
    ],
}  # fmt: skip


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
async def html_server() -> AsyncIterator[str]:
    """Answers every request with 200 and an HTML page, as a misrouted proxy would."""

    async def page(request: web.Request) -> web.Response:
        return web.Response(text="<html><body>Welcome to nginx!</body></html>",
                            content_type="text/html")  # fmt: skip

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", page)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    yield f"http://127.0.0.1:{port}/v1"
    await runner.cleanup()


def _target(label: str, url: str, **extra: object) -> Target:
    spec = BackendSpec.model_validate(
        {"label": label, "base_url": url, "model": "llama-3.1-8b", "hourly_usd": 0.8048, **extra}
    )
    return Target(spec, url, "llama-3.1-8b", 0.8048)


async def test_scores_show_faults_and_bad_backends_fail_alone(html_server: str) -> None:
    async with EmulatedFleet(FLEET) as fleet:
        targets = [_target(n, fleet.pods[n].url + "/v1") for n in ("good", "wrong-tools")]
        targets += [
            _target("unreachable", f"http://127.0.0.1:{_free_port()}/v1"),
            _target("html", html_server),
            _target("no-key", fleet.pods["good"].url + "/v1", api_key_env="IGW_TEST_NO_KEY"),
            _target("jittery", fleet.pods["jittery"].url + "/v1"),
        ]
        result = await run_benchmark(SETTINGS, targets, environ={})
    by = {b.label: b for b in result.backends}
    assert [b.label for b in result.backends] == [t.spec.label for t in targets]

    good = by["good"]
    assert good.status == "ok" and good.error is None
    assert good.tool_calls is not None
    assert (good.tool_calls.calls, good.tool_calls.filters) == (20, 20)
    assert good.determinism is not None and good.determinism.distinct == 1
    assert good.tokens_per_s.n == 4 and good.tokens_per_s.median
    assert good.cost_per_million_tokens == pytest.approx(
        0.8048 / (good.tokens_per_s.median * 3600) * 1e6
    )
    assert [r.run for r in good.runs] == [1, 2] and good.run_to_run_change_pct is not None
    assert [p.level for p in good.concurrency] == [1, 2]
    assert all(p.aggregate_tokens_per_s for p in good.concurrency)

    wrong = by["wrong-tools"]
    assert wrong.status == "ok" and wrong.tool_calls is not None
    assert wrong.tool_calls.filters < wrong.tool_calls.calls <= 20
    assert wrong.tool_calls.calls < 20  # the miss rate: some answers carry no call
    assert len(wrong.tool_calls.failures) == 20 - wrong.tool_calls.filters
    assert wrong.determinism is not None and wrong.determinism.distinct == 1

    jittery = by["jittery"]
    assert jittery.tool_calls is not None and jittery.tool_calls.filters == 20
    assert jittery.determinism is not None
    assert jittery.determinism.distinct == SETTINGS.determinism.repeats

    assert by["unreachable"].status == "error"
    assert "unreachable" in (by["unreachable"].error or "")
    assert by["html"].status == "error"
    assert "not an OpenAI-compatible answer" in (by["html"].error or "")
    assert by["no-key"].status == "error"
    assert by["no-key"].error == "API key variable IGW_TEST_NO_KEY is not set"
    assert {b.label for b in result.failed} == {"unreachable", "html", "no-key"}


def test_cli_writes_json_and_html_for_emulated_backends(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = {
        "settings": {**SETTINGS.model_dump(), "runs": 1, "concurrency": [1]},
        "backends": [
            {"label": "h100", "emulate": {"gpu": "H100"}},
            {"label": "h100-flaky",
             "emulate": {"gpu": "H100", "behavior": {"tool_call_error_rate": 1.0}}},
        ],
    }  # fmt: skip
    path = tmp_path / "backends.yaml"
    path.write_text(yaml.safe_dump(spec))
    out_json, out_html = tmp_path / "r.json", tmp_path / "r.html"
    code = main(["bench", "backends", str(path), "--json", str(out_json), "--html", str(out_html)])
    assert code == 0
    document = json.loads(out_json.read_text())
    rows = {b["label"]: b for b in document["backends"]}
    assert rows["h100"]["tool_calls"]["filters"] == 20
    assert rows["h100-flaky"]["tool_calls"]["filters"] == 0
    assert rows["h100"]["hourly_usd"] > 0 and rows["h100"]["cost_per_million_tokens"] > 0
    html = out_html.read_text()
    assert "h100-flaky" in html and "0/20" in html and "<svg" in html
    printed = capsys.readouterr().out
    assert "Backend benchmark" in printed and "20/20" in printed


def test_cli_bad_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "backends.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "backends": [
                    {"label": "x", "base_url": "http://h/v1", "model": "m"},
                    {"label": "y", "emulate": {"gpu": "B999"}},
                ]
            }
        )
    )
    assert main(["bench", "backends", str(path)]) == 2
    err = capsys.readouterr().err
    assert "backends[0]: a base_url backend needs model and hourly_usd" in err


def test_cli_unknown_emulated_gpu_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "backends.yaml"
    path.write_text(yaml.safe_dump({"backends": [{"label": "y", "emulate": {"gpu": "B999"}}]}))
    assert main(["bench", "backends", str(path)]) == 2
    assert "backends[0].emulate.gpu: unknown GPU profile 'B999'" in capsys.readouterr().err
