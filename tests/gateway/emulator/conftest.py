"""Fixtures: emulated pods started in-process on ephemeral loopback ports."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from openai_clients import openai_clients_closed  # noqa: F401  (autouse)

from inference_gateway.emulator.profiles import pod_profile
from inference_gateway.emulator.server import EmulatedPod


@pytest.fixture
async def pod() -> AsyncIterator[EmulatedPod]:
    """An H100 pod of the 8B model with two LoRA adapters and one slot."""
    profile = pod_profile("H100", "llama-3.1-8b", max_loras=1)
    pod = EmulatedPod("pod", profile, adapters=["sql", "support"], port=0)
    await pod.start()
    yield pod
    await pod.stop()
