"""Fleet mode: the Python API, the endpoints file, and `igw emulate` bad-input handling."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
from pathlib import Path

import aiohttp
import pytest
import yaml

from inference_gateway.cli.main import main
from inference_gateway.emulator.fleet import EmulatedFleet, load_fleet
from inference_gateway.errors import ConfigError

FLEET = {
    "base_port": 0,
    "pods": [
        {"name": "h100", "gpu": "H100", "model": "llama-3.1-8b", "replicas": 2},
        {
            "name": "a10g",
            "gpu": "A10G",
            "model": "llama-3.1-8b",
            "adapters": ["sql", "support"],
            "max_loras": 2,
            "labels": {"tier": "cheap"},
        },
    ],
}


async def test_fleet_start_stop_and_endpoints(tmp_path: Path) -> None:
    async with EmulatedFleet(FLEET) as fleet:
        endpoints = fleet.endpoints
        assert [e.name for e in endpoints] == ["h100-0", "h100-1", "a10g"]
        assert len({e.port for e in endpoints}) == 3
        assert endpoints[2].labels == {
            "igw.dev/pool": "a10g",
            "igw.dev/gpu": "A10G",
            "igw.dev/model": "llama-3.1-8b",
            "tier": "cheap",
        }
        path = tmp_path / "endpoints.yaml"
        fleet.write_endpoints(path)
        document = yaml.safe_load(path.read_text())
        assert document["endpoints"][0] == {
            "name": "h100-0",
            "address": "127.0.0.1",
            "port": endpoints[0].port,
            "labels": {
                "igw.dev/pool": "h100",
                "igw.dev/gpu": "H100",
                "igw.dev/model": "llama-3.1-8b",
            },
        }
        async with aiohttp.ClientSession() as session:
            for e in endpoints:
                async with session.get(f"http://{e.host}:{e.port}/v1/models") as response:
                    ids = [m["id"] for m in (await response.json())["data"]]
                    assert ids == (
                        ["llama-3.1-8b", "sql", "support"] if e.name == "a10g" else ["llama-3.1-8b"]
                    )
            await fleet.stop_pod("h100-1")
            with pytest.raises(aiohttp.ClientConnectionError):
                await session.get(f"http://127.0.0.1:{endpoints[1].port}/health")
            async with session.get(f"http://127.0.0.1:{endpoints[0].port}/health") as response:
                assert response.status == 200  # the others keep serving
            await fleet.start_pod("h100-1")
            async with session.get(f"http://127.0.0.1:{endpoints[1].port}/health") as response:
                assert response.status == 200
        with pytest.raises(KeyError, match="no pod named"):
            await fleet.stop_pod("nope")
    assert not any(pod.running for pod in fleet.pods.values())


def test_consecutive_ports_from_base_port() -> None:
    fleet = EmulatedFleet({**FLEET, "base_port": 9100})
    assert [e.port for e in fleet.endpoints] == [9100, 9101, 9102]


@pytest.mark.parametrize(
    ("fleet", "expected"),
    [
        (
            {"pods": [{"name": "a", "gpu": "H100", "model": "llama-3.1-8b", "gpux": 1}]},
            "pods[0].gpux",
        ),
        (
            {"pods": [{"name": "a", "gpu": "B300", "model": "llama-3.1-8b"}]},
            "pods[0].gpu: unknown GPU",
        ),
        (
            {"pods": [{"name": "a", "gpu": "H100", "model": "gpt-5"}]},
            "pods[0].model: unknown model",
        ),
        ({"pods": []}, "pods: List should have at least 1 item"),
        (
            {"pods": [{"name": "a", "gpu": "H100", "model": "llama-3.1-8b", "replicas": 0}]},
            "pods[0].replicas",
        ),
        (
            {"ports": 1, "pods": [{"name": "a", "gpu": "H100", "model": "llama-3.1-8b"}]},
            "ports: Extra inputs",
        ),
        (
            {
                "pods": [
                    {
                        "name": "a",
                        "gpu": "H100",
                        "model": "llama-3.1-8b",
                        "adapters": ["x"],
                        "max_loras": 0,
                    }
                ]
            },
            "max_loras must be at least 1",
        ),
        (
            {"pods": [{"name": "a", "gpu": "L4", "model": "llama-3.1-70b", "tp": 1}]},
            "pods[0]: llama-3.1-70b on 1x L4",
        ),
    ],
)
def test_bad_fleet_file_exits_2_with_the_field_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fleet: dict, expected: str
) -> None:
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(fleet))
    assert main(["emulate", "--fleet", str(path)]) == 2
    err = capsys.readouterr().err
    assert "invalid input" in err and expected in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--gpu", "H200X", "--model", "llama-3.1-8b"], "gpu: unknown GPU profile 'H200X'"),
        (["--gpu", "H100", "--model", "mistral"], "model: unknown model profile 'mistral'"),
        (["--model", "llama-3.1-8b"], "--gpu: required unless --fleet"),
        (["--fleet", "x.yaml", "--gpu", "H100"], "--gpu: not allowed with --fleet"),
        (["--fleet", "/nonexistent/fleet.yaml"], "cannot read file"),
    ],
)
def test_bad_arguments_exit_2(
    capsys: pytest.CaptureFixture[str], argv: list[str], expected: str
) -> None:
    assert main(["emulate", *argv]) == 2
    assert expected in capsys.readouterr().err


def test_malformed_yaml_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "fleet.yaml"
    path.write_text("pods: [unclosed\n")
    with pytest.raises(ConfigError, match="invalid YAML"):
        load_fleet(path)
    assert main(["emulate", "--fleet", str(path)]) == 2


@pytest.mark.slow
async def test_igw_emulate_fleet_process(tmp_path: Path) -> None:
    """The real command: prints one line per pod, writes endpoints, stops on SIGINT."""
    fleet_path, endpoints_path = tmp_path / "fleet.yaml", tmp_path / "endpoints.yaml"
    fleet_path.write_text(yaml.safe_dump(FLEET))
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "inference_gateway.cli.main", "emulate",
        "--fleet", str(fleet_path), "--write-endpoints", str(endpoints_path),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    assert process.stdout is not None
    lines = []
    try:
        async with asyncio.timeout(30):
            while not (line := (await process.stdout.readline()).decode()).startswith("3 pod(s)"):
                assert line, (await process.stderr.read()).decode()  # type: ignore[union-attr]
                lines.append(line)
        assert [line.split()[0] for line in lines[:3]] == ["h100-0", "h100-1", "a10g"]
        assert "A10G/llama-3.1-8b/tp1" in lines[2] and "tokens" in lines[2]
        endpoints = yaml.safe_load(endpoints_path.read_text())["endpoints"]
        async with aiohttp.ClientSession() as session:
            e = endpoints[2]
            url = f"http://{e['address']}:{e['port']}/v1/completions"
            async with session.post(
                url, json={"model": "sql", "prompt": "hi", "max_tokens": 3}
            ) as r:
                assert r.status == 200
        process.send_signal(signal.SIGINT)
        async with asyncio.timeout(10):
            assert await process.wait() == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


def test_port_in_use_is_a_runtime_failure(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        argv = ["emulate", "--gpu", "H100", "--model", "llama-3.1-8b", "--port", str(port)]
        assert main(argv) == 1
    assert "cannot listen" in capsys.readouterr().err
