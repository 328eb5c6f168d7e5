"""The in-cluster data path on loopback: emulated pods, `igw picker`, `igw bbr`, real Envoy.

`EnvoyStack` starts what a cluster runs for one Gateway, wired as Envoy Gateway v1.5 +
Envoy AI Gateway v0.4 wire it (the bootstrap comes from `inference_gateway.envoyproxy`,
the renderer a test holds against the GitOps tree):

    openai SDK → Envoy (listener :0) → ext_proc `igw bbr` → ext_proc `igw picker` (TLS,
    HTTP/2, one filter per pool) → ORIGINAL_DST on x-gateway-destination-endpoint → pod

and, as the rendered tree's `igw-status-route`, `GET /status` through Envoy to the
picker's metrics port (the heartbeat `igw global` polls; `--emf-cluster` in
`picker_args` names the cluster there).

The picker and the body-based router are real `igw` processes (so a test can SIGKILL or
SIGTERM them and start them again on the same port); the pods are an in-process
`EmulatedFleet` (`stop_pod` / `start_pod`). Envoy writes one JSON line per request to an
access log (`stack.access_log()`): status, response flags, the destination the picker
named and the upstream Envoy connected to. Everything binds loopback and stops in
`stop()`, including after a failed start.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import socket
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import openai
import yaml

from inference_gateway.emulator.fleet import EmulatedFleet
from inference_gateway.envoyproxy.process import EnvoyProcess
from inference_gateway.envoyproxy.settings import (
    Address,
    GatewaySettings,
    PoolRoute,
    StatusRoute,
)

__all__ = ["CONFIG", "FLEET", "EnvoyStack", "IgwProcess", "free_port", "routes_from_config"]

START_TIMEOUT_S = 20.0

#: Two pools of one model family and a second model: body-based routing has to choose.
FLEET: dict[str, Any] = {
    "base_port": 0,
    "pods": [
        {"name": "plain", "gpu": "H100", "model": "llama-3.1-8b", "replicas": 2},
        {
            "name": "lora",
            "gpu": "H100",
            "model": "llama-3.1-8b",
            "replicas": 1,
            "max_loras": 2,
            "adapters": ["sql"],
            "labels": {"igw.dev/pool": "plain"},
        },
        {"name": "small", "gpu": "H100", "model": "qwen3-32b", "replicas": 1},
    ],
}
CONFIG: dict[str, Any] = {
    "pools": [
        {"name": "plain", "selector": {"igw.dev/pool": "plain"}},
        {"name": "small", "selector": {"igw.dev/pool": "small"}},
    ],
    "models": [
        {"name": "llama-3.1-8b", "pool": "plain", "adapters": ["sql"]},
        {"name": "qwen3-32b", "pool": "small"},
    ],
}


_BOUND = re.compile(rb"ext_proc on [^ ]*:(\d+)")


def free_port() -> int:
    """A loopback port free right now (for a flag that takes no 0, like metrics)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class IgwProcess:
    """One `igw <command>` subprocess; `port` is the port its `ready` line printed (the
    ext_proc port by default), or the one it was given when that line names none.
    `port_flag` None: the port is in `args` already."""

    def __init__(
        self,
        command: str,
        args: list[str],
        *,
        port_flag: str | None = "--grpc-port",
        ready: re.Pattern[bytes] = _BOUND,
        port: int = 0,
        env: dict[str, str] | None = None,
    ) -> None:
        self.command = command
        self.env = env or {}
        self.args = args
        self.port_flag = port_flag
        self.ready = ready
        self.port = port
        self.log: list[str] = []
        self.process: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Start (again, on the same port once it has one) and wait for its bound line."""
        self.process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "inference_gateway.cli",
            self.command,
            *self.args,
            *([self.port_flag, str(self.port)] if self.port_flag else []),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1", **self.env},
        )
        bound = asyncio.get_running_loop().create_future()
        self._reader = asyncio.get_running_loop().create_task(self._read(self.process, bound))
        try:
            async with asyncio.timeout(START_TIMEOUT_S):
                self.port = await bound
        except BaseException:
            await self.kill()
            raise

    async def _read(self, process: asyncio.subprocess.Process, bound: asyncio.Future[int]) -> None:
        assert process.stdout is not None
        async for line in process.stdout:
            self.log.append(line.decode(errors="replace").rstrip())
            del self.log[:-300]
            match = self.ready.search(line)
            if match and not bound.done():
                bound.set_result(int(match.group(1)) if match.groups() else self.port)
        if not bound.done():
            tail = "\n".join(self.log[-30:])
            bound.set_exception(RuntimeError(f"igw {self.command} exited:\n{tail}"))

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.returncode is None

    async def signal(self, sig: int) -> None:
        if self.running:
            assert self.process is not None
            self.process.send_signal(sig)

    async def wait(self, timeout_s: float = 30.0) -> int:
        assert self.process is not None
        async with asyncio.timeout(timeout_s):
            code = await self.process.wait()
        if self._reader is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._reader, 5)
        return code

    async def kill(self) -> None:
        await self.signal(signal.SIGKILL)
        if self.process is not None:
            await self.wait()

    async def stop(self) -> None:
        """SIGTERM, then SIGKILL if it is still there after 30 s."""
        if not self.running:
            return
        await self.signal(signal.SIGTERM)
        try:
            await self.wait()
        except TimeoutError:
            await self.kill()


def routes_from_config(config: dict[str, Any], picker: Address) -> tuple[PoolRoute, ...]:
    """One HTTPRoute per pool matching its models and adapters, then the `/v1` catch-all
    to the first pool by name: what `charts.gateway.routes` renders for an environment."""
    by_pool: dict[str, list[str]] = {p["name"]: [] for p in config.get("pools", [])}
    for model in config.get("models", []):
        names = by_pool.setdefault(model["pool"], [])
        for name in [model["name"], *model.get("adapters", [])]:
            if name not in names:
                names.append(name)
    routes = [
        PoolRoute(route=f"{pool}-route", pool=pool, picker=picker, models=tuple(models))
        for pool, models in by_pool.items()
    ]
    if routes:
        first = sorted(by_pool)[0]
        routes.append(PoolRoute(route="igw-default-route", pool=first, picker=picker))
    return tuple(routes)


class EnvoyStack:
    """Pods, picker, body-based router and Envoy; `async with EnvoyStack(...) as stack`."""

    def __init__(
        self,
        fleet: dict[str, Any],
        config: dict[str, Any],
        *,
        bbr: bool = True,
        picker_args: list[str] | None = None,
        tls: bool = True,
        envoy_concurrency: int = 1,
        env: dict[str, str] | None = None,
        pod_tracing: Any = None,
        **settings: Any,
    ) -> None:
        """`env`: extra environment of the picker and the body-based router (their
        OTEL_* settings); `pod_tracing`: the emulated pods' `Tracing`."""
        self.fleet_spec = fleet
        self.config = config
        self.with_bbr = bbr
        self.picker_args = picker_args or []
        self.tls = tls
        self.envoy_concurrency = envoy_concurrency
        self.settings_overrides = settings
        self.env = env
        self.pod_tracing = pod_tracing
        self.fleet: EmulatedFleet | None = None
        self.picker: IgwProcess | None = None
        self.bbr: IgwProcess | None = None
        self.envoy: EnvoyProcess | None = None
        self.metrics_port = 0
        self._dir: tempfile.TemporaryDirectory[str] | None = None

    @property
    def folder(self) -> Path:
        assert self._dir is not None
        return Path(self._dir.name)

    @property
    def url(self) -> str:
        assert self.envoy is not None
        return self.envoy.url

    async def start(self) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="igw-envoy-stack-")
        try:
            await self._start()
        except BaseException:
            await self.stop()
            raise

    async def _start(self) -> None:
        endpoints = self.folder / "endpoints.yaml"
        await self.start_pods(endpoints)
        config = self.folder / "config.yaml"
        config.write_text(yaml.safe_dump(self.config, sort_keys=False))
        self.metrics_port = free_port()
        tls = ["--tls"] if self.tls else []
        self.picker = IgwProcess(
            "picker",
            [
                "--endpoints",
                str(endpoints),
                "--config",
                str(config),
                "--metrics-port",
                str(self.metrics_port),
                *tls,
                *self.picker_args,
            ],
            env=self.env,
        )
        await self.picker.start()
        if self.with_bbr:
            self.bbr = IgwProcess("bbr", ["--config", str(config)], env=self.env)
            await self.bbr.start()
        await self.before_envoy()
        self.envoy = EnvoyProcess(self.settings(), concurrency=self.envoy_concurrency)
        await self.envoy.start()

    async def start_pods(self, endpoints: Path) -> None:
        """Start the pods and write the endpoints file the picker reads (a subclass may
        put other processes in front of them, as a P/D sidecar)."""
        self.fleet = EmulatedFleet(self.fleet_spec, tracing=self.pod_tracing)
        await self.fleet.start()
        self.fleet.write_endpoints(endpoints)

    async def before_envoy(self) -> None:
        """What a subclass starts once the picker runs, before Envoy (nothing here)."""

    def picker_address(self) -> Address:
        """Where Envoy reaches the picker (a subclass may put a Service in front)."""
        assert self.picker is not None
        return Address("127.0.0.1", self.picker.port)

    def settings(self) -> GatewaySettings:
        picker = self.picker_address()
        values: dict[str, Any] = {
            "routes": routes_from_config(self.config, picker),
            "bbr": Address("127.0.0.1", self.bbr.port) if self.bbr else None,
            "listener_address": "127.0.0.1",
            "listener_port": 0,
            "picker_tls": self.tls,
            "access_log": str(self.folder / "access.log"),
            "status": StatusRoute(backend=Address("127.0.0.1", self.metrics_port)),
        }
        values.update(self.settings_overrides)
        return GatewaySettings(**values)

    def client(self, **options: Any) -> openai.AsyncOpenAI:
        options.setdefault("max_retries", 0)
        options.setdefault("timeout", 30.0)
        options.setdefault("api_key", "unused")  # the key is the rate limits' client
        return openai.AsyncOpenAI(base_url=self.url + "/v1", **options)

    def access_log(self) -> list[dict[str, Any]]:
        """Envoy's lines so far (Envoy flushes its access log about every second)."""
        path = self.folder / "access.log"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    async def wait_access_log(
        self,
        count: int,
        timeout_s: float = 10.0,
        where: Callable[[dict[str, Any]], bool] = lambda line: True,
    ) -> list[dict[str, Any]]:
        """The lines once `count` of them are `where`'s, or at `timeout_s`: all of them."""
        deadline = time.monotonic() + timeout_s
        while True:
            lines = self.access_log()
            if sum(map(where, lines)) >= count or time.monotonic() > deadline:
                return lines
            await asyncio.sleep(0.1)

    def pod_address(self, name: str) -> str:
        assert self.fleet is not None
        pod = next(e for e in self.fleet.endpoints if e.name == name)
        return f"{pod.host}:{pod.port}"

    async def stop(self) -> None:
        if self.envoy is not None:
            await self.envoy.stop()
        for part in (self.bbr, self.picker):
            if part is not None:
                await part.stop()
        if self.fleet is not None:
            await self.fleet.stop()
        if self._dir is not None:
            self._dir.cleanup()
            self._dir = None

    async def __aenter__(self) -> EnvoyStack:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()
