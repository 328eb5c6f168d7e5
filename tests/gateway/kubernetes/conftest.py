"""Fixtures: a fake Kubernetes API server on loopback and a client pointed at it."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

# The tests import the fake API server beside them, and the fake Envoy of the picker
# tests, as plain modules (no packages here).
sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent / "frontends" / "extproc"))

from fake_apiserver import FakeApiServer

from inference_gateway.kubernetes.discovery import api_client


@pytest.fixture
async def apiserver() -> AsyncIterator[FakeApiServer]:
    server = FakeApiServer()
    await server.start()
    yield server
    await server.stop()


@pytest.fixture
async def client(apiserver: FakeApiServer) -> AsyncIterator[Any]:
    api = await api_client(host=apiserver.url)
    yield api
    await api.close()
