"""The demo's processes: each `igw` server the demo compares runs as its own process.

In a cluster the model servers, the gateway, the picker and the body-based router are
separate pods; a gateway sharing an event loop with the pods it routes to would steal
their time (and they its), differently for each policy. So the demo starts every one of
them as the command a user would run (`python -m inference_gateway.cli …`), waits for
the line it prints once it listens, and stops it with SIGTERM (SIGKILL after a bound).
`pids` lets the demo, and its tests, show that nothing it measures shares its process.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from types import TracebackType
from typing import Self

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

__all__ = ["IgwProcess", "cpu_wait_s", "metric_values", "wait_for_metric"]

START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0


class IgwProcess:
    """`igw COMMAND ARGS…` as a child process; `start()` returns the match of `ready` in
    its output (stdout and stderr together), or raises with the output's last lines."""

    def __init__(self, command: str, args: list[str], ready: str) -> None:
        self.command = command
        self.args = args
        self.ready = re.compile(ready)
        self.log: list[str] = []
        self.process: asyncio.subprocess.Process | None = None
        self.bound: re.Match[str] | None = None  # the ready line's match, once started
        self._reader: asyncio.Task[None] | None = None

    @property
    def pid(self) -> int:
        return self.process.pid if self.process is not None else 0

    async def start(self) -> re.Match[str]:
        self.process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "inference_gateway.cli",
            self.command,
            *self.args,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        found: asyncio.Future[re.Match[str]] = asyncio.get_running_loop().create_future()
        self._reader = asyncio.get_running_loop().create_task(self._read(found))
        try:
            async with asyncio.timeout(START_TIMEOUT_S):
                self.bound = await found
                return self.bound
        except BaseException:
            await self.stop()
            raise

    async def _read(self, found: asyncio.Future[re.Match[str]]) -> None:
        assert self.process is not None and self.process.stdout is not None
        async for raw in self.process.stdout:
            line = raw.decode(errors="replace").rstrip()
            self.log.append(line)
            del self.log[:-100]  # bounded: the last lines are what a failure needs
            match = self.ready.search(line)
            if match and not found.done():
                found.set_result(match)
        if not found.done():
            found.set_exception(RuntimeError(f"`igw {self.command}` exited:\n{self.tail()}"))

    def tail(self, lines: int = 20) -> str:
        return "\n".join(self.log[-lines:])

    async def stop(self) -> None:
        """SIGTERM (each server drains and exits), SIGKILL if it is still there after
        `STOP_TIMEOUT_S`; idempotent."""
        process = self.process
        if process is None:
            return
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(process.wait(), STOP_TIMEOUT_S)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
                await process.wait()
        if self._reader is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._reader, 5)

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


async def metric_values(
    session: aiohttp.ClientSession, url: str, names: Iterable[str], timeout_s: float = 5.0
) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """Every sample of each metric in `names` at `url` (Prometheus text), by its labels;
    one GET for all of them."""
    wanted = set(names)
    async with session.get(url, timeout=aiohttp.ClientTimeout(total=timeout_s)) as response:
        response.raise_for_status()
        text = await response.text()
    out: dict[str, dict[tuple[tuple[str, str], ...], float]] = {name: {} for name in wanted}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in wanted:
                out[sample.name][tuple(sorted(sample.labels.items()))] = sample.value
    return out


async def wait_for_metric(
    url: str, name: str, expected: float, process: IgwProcess, timeout_s: float = START_TIMEOUT_S
) -> None:
    """Until some sample of `name` at `url` reads `expected` (a data plane that sees every
    pod ready); a clear error if `process` exits first or the time runs out."""
    deadline = time.monotonic() + timeout_s
    seen: dict[tuple[tuple[str, str], ...], float] | None = None
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < deadline:
            if process.process is not None and process.process.returncode is not None:
                raise RuntimeError(f"`igw {process.command}` exited:\n{process.tail()}")
            with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                seen = (await metric_values(session, url, [name]))[name]
                if expected in seen.values():
                    return
            await asyncio.sleep(0.1)
    raise TimeoutError(f"{url}: {name} never read {expected} (last: {seen})\n{process.tail()}")


def cpu_wait_s(pids: Iterable[int]) -> float | None:
    """Seconds the threads of `pids` have spent ready to run but waiting for a CPU (the
    run-queue wait in `/proc/PID/task/TID/schedstat`), or None where Linux's scheduler
    statistics are not there. The difference over a replay says how much of its
    latency was the machine's, not the policy's."""
    total = 0
    try:
        for pid in pids:
            for task in Path(f"/proc/{pid}/task").iterdir():
                total += int((task / "schedstat").read_text().split()[1])
    except (OSError, IndexError, ValueError):
        return None
    return total / 1e9
