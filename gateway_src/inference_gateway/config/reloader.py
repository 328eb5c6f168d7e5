"""Live reload of the config and rewrite files: poll their modification times, validate
the new versions, and swap them in only when valid. An invalid edit is logged with its
field paths and the last good state keeps serving.

The event loop only polls and swaps. Reading, parsing and validating the files runs in a
short-lived Python process of its own (`load_off_loop`): a worker thread would not do,
as YAML parsing (LibYAML's composer above all) and validation hold the GIL, and a
30 MB file once held `/health` for 10 s. Each file is read to at most
`config.spec.MAX_CONFIG_BYTES` (one ConfigMap's worth), so a runaway file is refused
unparsed, and a load that outlives `LOAD_TIMEOUT_S` is killed and rejected. `igw serve`
and `igw picker` (file mode) both reload through here; their first load, before they
serve, runs in place.

    python -m inference_gateway.config.reloader      the worker: a pickled callable on
                                                    stdin, its pickled outcome on stdout
"""

from __future__ import annotations

import asyncio
import logging
import pickle
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

from inference_gateway.errors import ConfigError

__all__ = ["LOAD_TIMEOUT_S", "FileWatcher", "load_off_loop"]

log = logging.getLogger(__name__)

T = TypeVar("T")
LOAD_TIMEOUT_S = 60.0  # a 1 MiB config takes well under a second


async def load_off_loop(load: Callable[[], T], timeout_s: float = LOAD_TIMEOUT_S) -> T:
    """`load()` in a fresh process: its value, or the exception it raised. `load` must
    pickle (a module-level function, or a `functools.partial` of one)."""
    source = getattr(load, "func", load)
    where = f"{getattr(source, '__module__', '?')}.{getattr(source, '__qualname__', '?')}"
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        __name__,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        async with asyncio.timeout(timeout_s):
            out, err = await process.communicate(pickle.dumps(load))
    except TimeoutError:
        raise ConfigError(where, [f"<root>: loading took over {timeout_s:g} s"]) from None
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    if process.returncode != 0 or not out:
        reason = err.decode(errors="replace").strip().splitlines()[-1:] or ["no output"]
        raise ConfigError(where, [f"<root>: the loader failed: {reason[0]}"])
    ok, value = pickle.loads(out)
    if not ok:
        raise value
    result: T = value
    return result


def _worker() -> None:
    """Run the pickled callable from stdin; write `(True, value)` or `(False, error)`."""
    load = pickle.loads(sys.stdin.buffer.read())
    outcome: tuple[bool, Any]
    try:
        outcome = (True, load())
    except Exception as error:
        try:
            pickle.loads(pickle.dumps(error))
            outcome = (False, error)
        except Exception:  # an exception that does not survive pickling: its words do
            outcome = (False, ConfigError("reload", [f"<root>: {error!r}"]))
    sys.stdout.buffer.write(pickle.dumps(outcome))


class FileWatcher:
    """Polls `paths` every `interval_s`; a change awaits `on_change` (which loads off the
    loop and applies), a `ConfigError` from it is logged and counted, never raised."""

    def __init__(
        self, paths: list[Path], on_change: Callable[[], Awaitable[None]], interval_s: float = 1.0
    ) -> None:
        self.paths = paths
        self.on_change = on_change
        self.interval_s = interval_s
        self._seen = self._stamp()
        self._checking = asyncio.Lock()  # one reload at a time, in the order of edits
        self.reloads = 0
        self.failures = 0

    def _stamp(self) -> tuple[float, ...]:
        stamps = []
        for path in self.paths:
            files = sorted(path.glob("*.yaml")) if path.is_dir() else [path]
            stamps += [f.stat().st_mtime_ns if f.exists() else -1 for f in files]
        return tuple(stamps)

    async def check(self) -> bool:
        """Reload if anything changed; True when a new state was swapped in, by this
        check or by one it waited for (checks run one at a time, in order)."""
        reloads = self.reloads
        async with self._checking:
            changed = await self._check()
        return changed or self.reloads > reloads

    async def _check(self) -> bool:
        stamp = self._stamp()
        if stamp == self._seen:
            return False
        self._seen = stamp
        try:
            await self.on_change()
        except ConfigError as error:
            self.failures += 1
            log.error(
                "rejected invalid update of %s; still serving the last good config: %s",
                error.source,
                "; ".join(error.problems),
            )
            return False
        self.reloads += 1
        log.info("reloaded %s", ", ".join(str(p) for p in self.paths))
        return True

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            await self.check()


if __name__ == "__main__":
    _worker()
