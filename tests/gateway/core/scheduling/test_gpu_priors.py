"""GPU speed priors are routing's own table: the scorer takes them as a parameter, and the
core imports neither the emulator nor a data plane (DESIGN §2)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from inference_gateway.config.spec import GatewayConfigSpec
from inference_gateway.core.scheduling import Endpoint, LLMRequest, PodMetrics, Scheduler
from inference_gateway.core.scheduling.gpu_priors import GPU_SECONDS_PER_PREFILL_TOKEN, gpu_priors
from inference_gateway.core.scheduling.plugins.predicted_ttft import PredictedTTFTScorer
from inference_gateway.core.scheduling.plugins.prefix import PrefixIndex
from inference_gateway.core.scheduling.registry import build_plugin
from inference_gateway.core.scheduling.types import PluginContext


def build(parameters: dict[str, object]) -> PredictedTTFTScorer:
    context = PluginContext(index=PrefixIndex(), priors=gpu_priors())
    scorer = build_plugin("predicted-ttft-scorer", "ttft", parameters, context)
    assert isinstance(scorer, PredictedTTFTScorer)
    return scorer


def test_the_core_imports_no_emulator_data_plane_or_web_framework() -> None:
    code = (
        "import sys, inference_gateway.core.scheduling, inference_gateway.core.traffic, "
        "inference_gateway.core.scheduling.plugins.predicted_ttft; "
        "bad = [m for m in sys.modules if m.startswith(('inference_gateway.emulator', "
        "'inference_gateway.frontends', 'inference_gateway.transport', 'aiohttp', "
        "'grpc'))]; print(bad)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_picker_module_does_not_import_aiohttp() -> None:
    """The ext_proc picker shares types with the proxy through `contracts`, not `proxy`."""
    code = (
        "import sys, inference_gateway.frontends.extproc.picker; "
        "print([m for m in sys.modules if m.startswith('aiohttp')])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_shipped_table_matches_the_emulated_gpus() -> None:
    """The emulator's profiles (FLOPs over dense bf16 peak x prefill MFU, 8B model) and the
    routing table must not drift apart; the test, not the core, holds both."""
    from inference_gateway.emulator.profiles import gpu_profiles, model_profiles

    params = model_profiles()["llama-3.1-8b"].params_b * 1e9
    for name, gpu in gpu_profiles().items():
        expected = 2 * params / (gpu.dense_bf16_tflops * 1e12 * gpu.mfu_prefill)
        assert GPU_SECONDS_PER_PREFILL_TOKEN[name] == pytest.approx(expected, rel=1e-3)
    assert gpu_priors() == dict(GPU_SECONDS_PER_PREFILL_TOKEN)


def _a10g_and_h100() -> list[Endpoint]:
    return [
        Endpoint(g, "h", i, labels={"igw.dev/gpu": g}, metrics=PodMetrics(), stale=False)
        for i, g in enumerate(("A10G", "H100"))
    ]


def test_the_scorer_starts_from_the_shipped_priors() -> None:
    """Before any TTFT is measured, an idle H100 beats an idle A10G."""
    scorer = build({})
    a10g, h100 = scorer.score(LLMRequest("r", "m", prompt_tokens=2000), _a10g_and_h100())
    assert h100 == 1.0 and a10g < 0.2


def test_priors_are_a_scorer_parameter() -> None:
    """`gpu_seconds_per_token` overrides the shipped table (here: the A10G made faster)."""
    scorer = build({"gpu_seconds_per_token": {"A10G": 1e-6, "H100": 1e-4}})
    a10g, h100 = scorer.score(LLMRequest("r", "m", prompt_tokens=2000), _a10g_and_h100())
    assert a10g == 1.0 and h100 < a10g
    with pytest.raises(ValueError):
        build({"gpu_seconds_per_token": {"A10G": -1.0}})


def test_the_scheduler_defaults_to_the_shipped_table() -> None:
    scheduler = Scheduler(GatewayConfigSpec())
    h100 = _a10g_and_h100()[1]
    ranked = scheduler.schedule(
        LLMRequest("r", "llama-3.1-8b", prompt_tokens=2000), [*_a10g_and_h100()]
    )
    assert ranked[0].name == h100.name
