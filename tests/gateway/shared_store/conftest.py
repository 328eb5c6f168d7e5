"""A real `redis-server` on a free loopback port per test module (started and stopped here)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from inference_gateway.shared_store.local_server import LocalRedis


@pytest.fixture
def redis_server() -> Iterator[LocalRedis]:
    with LocalRedis() as server:
        yield server
