"""Pins the public API of the emulator's serving modules: every `__all__` name exists."""

from __future__ import annotations

import importlib

import pytest

EXPORTS = {
    "tokens": {"count_tokens", "render_chat", "filler_text", "prompt_seed"},
    "realtime": {"PodStoppedError", "RealtimeDriver", "Ticket"},
    "metrics_text": {"PodMetrics", "TTFT_BUCKETS", "E2E_BUCKETS"},
    "server": {"EmulatedPod", "PodApp"},
    "fleet": {"EmulatedFleet", "Endpoint", "FleetSpec", "PodGroupSpec", "load_fleet"},
    "cli": {"register", "build_spec", "run"},
    "kv_publisher": {"KVEventsConfig", "ZmqKVPublisher", "parse_kv_events_config"},
}


@pytest.mark.parametrize("name", sorted(EXPORTS))
def test_module_exports(name: str) -> None:
    module = importlib.import_module(f"inference_gateway.emulator.{name}")
    assert EXPORTS[name] <= set(module.__all__)
    for symbol in module.__all__:
        assert hasattr(module, symbol), f"{name}.{symbol}"
