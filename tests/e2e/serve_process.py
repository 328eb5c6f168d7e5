"""`igw serve` as a real process on a free loopback port, for tests that need what only a
process has: signals, its own RSS, its own log on stderr."""

from __future__ import annotations

import asyncio
import socket
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import yaml


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class ServeProcess:
    process: asyncio.subprocess.Process
    url: str
    port: int

    def rss_kib(self) -> int:
        """Resident set size from /proc (VmRSS, KiB)."""
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise AssertionError("no VmRSS line")

    async def stderr_text(self) -> str:
        assert self.process.stderr is not None
        return (await self.process.stderr.read()).decode(errors="replace")


def write_endpoints(
    path: Path, ports: list[int], labels: list[dict[str, str]] | None = None
) -> Path:
    """Pods `pod-0`, `pod-1`, … on loopback, in pool `p`, each with its own `labels`."""
    extra = labels or [{} for _ in ports]
    path.write_text(
        yaml.safe_dump(
            {
                "endpoints": [
                    {
                        "name": f"pod-{i}",
                        "address": "127.0.0.1",
                        "port": port,
                        "labels": {"igw.dev/pool": "p", **more},
                    }
                    for i, (port, more) in enumerate(zip(ports, extra, strict=True))
                ]
            }
        )
    )
    return path


@asynccontextmanager
async def igw_serve(
    tmp_path: Path,
    pod_ports: list[int],
    *flags: str,
    config: dict[str, object] | None = None,
    wait_healthy: bool = True,
    labels: list[dict[str, str]] | None = None,
) -> AsyncIterator[ServeProcess]:
    """Start `igw serve` over `pod_ports`; killed on exit if it is still running."""
    endpoints = write_endpoints(tmp_path / "endpoints.yaml", pod_ports, labels)
    args = ["serve", "--endpoints", str(endpoints)]
    if config is not None:
        config_path = tmp_path / "config.yaml"
        config_path.write_text(yaml.safe_dump(config))
        args += ["--config", str(config_path)]
    port = free_port()
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        "import sys; from inference_gateway.cli.main import main; sys.exit(main())",
        *args,
        "--port",
        str(port),
        *flags,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    served = ServeProcess(process, f"http://127.0.0.1:{port}", port)
    try:
        await until_listening(served, healthy=wait_healthy)
        yield served
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


async def until_listening(served: ServeProcess, *, healthy: bool, within_s: float = 30) -> None:
    deadline = time.monotonic() + within_s
    async with aiohttp.ClientSession() as client:
        while True:
            if served.process.returncode is not None:
                raise AssertionError(
                    f"igw serve exited {served.process.returncode}: {await served.stderr_text()}"
                )
            try:
                async with client.get(served.url + "/health") as r:
                    if r.status == 200 or not healthy:
                        return
            except aiohttp.ClientConnectionError:
                pass
            assert time.monotonic() < deadline, "igw serve did not come up"
            await asyncio.sleep(0.1)


async def until_refused(port: int, within_s: float = 2.0) -> None:
    """New connections are refused within `within_s`."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        except (
            ConnectionRefusedError,
            ConnectionResetError,
        ):  # a listener closing mid-connect resets
            return
        writer.close()
        assert time.monotonic() < deadline, "still accepting connections"
        await asyncio.sleep(0.05)
