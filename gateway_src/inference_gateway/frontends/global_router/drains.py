"""Planned drains: the operator's set of clusters every router keeps out while it runs.

`igw global drain CLUSTER|--region R` / `undrain` write the set; every `igw global`
replica reads it once per poll interval (`ClusterPoller.poll_once`) and applies it with
`ClusterRegistry.set_planned`: a listed cluster is drained at once, a lifted one ramps
back over `rampS`. No DNS change and no router restart is needed, so a router never
hands a returning cluster its full share at once.

Where the set lives:

* the shared store (`store` in the config), one Redis set per fleet
  (`{<keyPrefix>:fleet}:drained`): every replica sees a change within `pollIntervalMs`.
  While the store is away a router keeps the last set it read (a drain does not silently
  end because the store blinked);
* `drainFile` (one cluster name per line, `#` comments): for a router without a store,
  or as the fallback the CLI writes when the store is unreachable (in Kubernetes a
  mounted ConfigMap, which reaches the pods within the kubelet's sync period).

A router drains the union of both. Names are checked against the config by the CLI;
a router ignores names it does not know (another fleet's, sharing the store).
"""

from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path

from redis.asyncio import Redis

from inference_gateway.config.global_router import GlobalRouterSpec
from inference_gateway.shared_store.client import StoreHealth, StoreUnavailable

__all__ = ["PlannedDrains", "drain_key", "read_drain_file", "write_drain_file"]

log = logging.getLogger(__name__)
MAX_FILE_BYTES = 64 * 1024


def drain_key(spec: GlobalRouterSpec) -> str:
    return f"{{{spec.rate_limits.key_prefix}:fleet}}:drained"


def read_drain_file(path: str | Path) -> frozenset[str]:
    """The names in a drain file; a missing file is an empty set, a broken one is logged
    and read as empty up to the error (never a crash of the poll loop)."""
    try:
        with open(path, "rb") as handle:
            raw = handle.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        return frozenset()
    except OSError as error:
        log.warning("drain file %s unreadable: %s", path, error)
        return frozenset()
    if len(raw) > MAX_FILE_BYTES:
        log.warning("drain file %s larger than 64 KiB: ignored", path)
        return frozenset()
    lines = raw.decode("utf-8", errors="replace").splitlines()
    return frozenset(n for line in lines if (n := line.split("#", 1)[0].strip()))


def write_drain_file(path: str | Path, names: frozenset[str]) -> None:
    """Replace the file atomically (a router reading it mid-write sees old or new)."""
    target = Path(path)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".drained.")
    with os.fdopen(fd, "w") as handle:
        handle.write("# clusters drained by `igw global drain`; one per line\n")
        handle.writelines(f"{n}\n" for n in sorted(names))
    os.replace(tmp, target)


class PlannedDrains:
    """Reads (routers) and changes (CLI) the drain set."""

    def __init__(
        self, spec: GlobalRouterSpec, redis: Redis | None, health: StoreHealth | None
    ) -> None:
        self.spec = spec
        self.redis = redis
        self.health = health
        self.key = drain_key(spec)
        self._last_store: frozenset[str] = frozenset()

    async def current(self, *, strict: bool = False) -> frozenset[str]:
        """The union of the store's set (the last one read while it is away) and the file.
        `strict` (the CLI's `drained`): raise `StoreUnavailable` instead, since a set
        nobody could read is not an empty one."""
        if self.redis is not None and self.health is not None:
            redis = self.redis
            try:
                members = await self.health.call(lambda: redis.smembers(self.key))
                self._last_store = frozenset(
                    m.decode() if isinstance(m, bytes) else str(m) for m in members
                )
            except StoreUnavailable:
                if strict:
                    raise
        from_file = read_drain_file(self.spec.drain_file) if self.spec.drain_file else frozenset()
        return self._last_store | from_file

    async def change(self, names: frozenset[str], *, drain: bool) -> str:
        """Add (`drain`) or remove names; returns where it was written. Raises
        `StoreUnavailable` when the store is down and no `drainFile` can take it."""
        if self.redis is not None and self.health is not None:
            redis = self.redis
            op = redis.sadd if drain else redis.srem
            try:
                await self.health.call(lambda: op(self.key, *names))
                return "store"
            except StoreUnavailable:
                if self.spec.drain_file is None:
                    raise
        if self.spec.drain_file is None:
            raise StoreUnavailable("neither a store nor a drainFile is configured")
        now = read_drain_file(self.spec.drain_file)
        write_drain_file(self.spec.drain_file, now | names if drain else now - names)
        return f"file {self.spec.drain_file}"
