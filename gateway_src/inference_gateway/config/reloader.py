"""Live reload of the config and rewrite files: poll their modification times, validate
the new versions, and swap them in only when valid. An invalid edit is logged with its
field paths and the last good state keeps serving."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path

from inference_gateway.errors import ConfigError

__all__ = ["FileWatcher"]

log = logging.getLogger(__name__)


class FileWatcher:
    def __init__(
        self, paths: list[Path], on_change: Callable[[], None], interval_s: float = 1.0
    ) -> None:
        self.paths = paths
        self.on_change = on_change
        self.interval_s = interval_s
        self._seen = self._stamp()
        self.reloads = 0
        self.failures = 0

    def _stamp(self) -> tuple[float, ...]:
        stamps = []
        for path in self.paths:
            files = sorted(path.glob("*.yaml")) if path.is_dir() else [path]
            stamps += [f.stat().st_mtime_ns if f.exists() else -1 for f in files]
        return tuple(stamps)

    def check(self) -> bool:
        """Reload if anything changed; True when a new state was swapped in."""
        stamp = self._stamp()
        if stamp == self._seen:
            return False
        self._seen = stamp
        try:
            self.on_change()
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
            self.check()
