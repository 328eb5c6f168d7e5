"""Model, instance and tensor-parallel profiles pinned against hand arithmetic.

Every expected value below is computed here from the published model shapes (Hugging Face
configs: Llama-3.1 [M2], Qwen3-32B [M3], Qwen3-235B-A22B [Q1]) and GPU figures
(shared/PROFILES-FACTS.md), not read back from the profile files, so a wrong constant in
`emulator/profiles/*.yaml` or a wrong derivation in `profiles.py` fails a test.
"""

from __future__ import annotations

import pytest

from inference_gateway.emulator.engine import Engine
from inference_gateway.emulator.profiles import BLOCK_SIZE, model_profiles, pod_profile
from inference_gateway.errors import ConfigError

GIB = 2**30
H100_USABLE = 79.18 * 0.9  # [M1] total seen by vLLM x gpu_memory_utilization
A10G_USABLE = 22.35 * 0.9  # [A3] 22,888 MiB


def kv_bytes(layers: int, kv_heads: int, head_dim: int = 128) -> int:
    return 2 * layers * kv_heads * head_dim * 2  # K and V, BF16


def tp_group_tokens(usable: float, weights: float, tp: int, overhead: float, per_gpu: int) -> int:
    """vLLM's start-up arithmetic for one GPU of the group, in 16-token blocks."""
    blocks = int((usable - weights / tp - overhead) * GIB // (BLOCK_SIZE * per_gpu))
    return blocks * BLOCK_SIZE


@pytest.mark.parametrize(
    ("model", "layers", "kv_heads", "params_b", "bytes_per_param", "weight_gib"),
    [
        ("llama-3.1-70b", 80, 8, 70.55, 2, 131.4),
        ("qwen3-32b", 64, 8, 32.76, 2, 61.03),  # vLLM measured 61.03 [M1]; 61.02 computed
        ("qwen3-235b-a22b", 94, 4, 235.09, 2, 437.9),
    ],
)
def test_kv_bytes_and_weights_follow_the_published_shapes(
    model: str, layers: int, kv_heads: int, params_b: float, bytes_per_param: int, weight_gib: float
) -> None:
    m = model_profiles()[model]
    assert m.kv_bytes_per_token == kv_bytes(layers, kv_heads)
    assert m.weight_gib == pytest.approx(params_b * 1e9 * bytes_per_param / GIB, rel=2e-3)
    assert m.weight_gib == pytest.approx(weight_gib, abs=0.01)


def test_qwen3_235b_experts_active_params_and_fp8_bytes() -> None:
    """94 layers x 128 experts x 3 matrices of 4096 x 1536 [Q1]; 8 routed per token."""
    expert_params = 94 * 128 * 3 * 4096 * 1536
    bf16, fp8 = model_profiles()["qwen3-235b-a22b"], model_profiles()["qwen3-235b-a22b-fp8"]
    assert bf16.expert_weight_gib == pytest.approx(expert_params * 2 / GIB, abs=0.05)
    assert fp8.expert_weight_gib == pytest.approx(expert_params * 1 / GIB, abs=0.05)
    # active: the experts' 8/128, plus everything that is not an expert (embeddings too)
    dense_params = 235.09e9 - expert_params
    assert bf16.compute_params_b == pytest.approx((dense_params + expert_params / 16) / 1e9, 0.01)
    # FP8: linear layers 1 byte, embeddings (2 x 151,936 x 4096), norms and router 2 bytes
    two_byte = 2 * 151936 * 4096 + 94 * (4096 * 128 + 2 * 4096 + 2 * 128) + 4096
    assert fp8.weight_gib == pytest.approx(((235.09e9 - two_byte) + 2 * two_byte) / GIB, 2e-3)
    assert fp8.kv_bytes_per_token == bf16.kv_bytes_per_token == kv_bytes(94, 4)


@pytest.mark.parametrize(
    ("gpu", "model", "tp", "usable", "weights", "overhead", "per_gpu"),
    [
        # 8 KV heads over 2 GPUs: 4 each
        ("H100", "qwen3-32b", 2, H100_USABLE, 61.03, 4.89, kv_bytes(64, 4)),
        ("A10G", "qwen3-32b", 4, A10G_USABLE, 61.03, 1.4, kv_bytes(64, 2)),
        ("H100", "llama-3.1-70b", 4, H100_USABLE, 131.4, 4.89, kv_bytes(80, 2)),
        ("A10G", "llama-3.1-70b", 8, A10G_USABLE, 131.4, 1.4, kv_bytes(80, 1)),
        # 4 KV heads over 4 GPUs: 1 each
        ("H100", "qwen3-235b-a22b-fp8", 4, H100_USABLE, 220.15, 4.89, kv_bytes(94, 1)),
        # 4 KV heads over 8 GPUs: vLLM replicates, each GPU still holds one whole head
        ("H100", "qwen3-235b-a22b", 8, H100_USABLE, 437.9, 4.89, kv_bytes(94, 1)),
    ],
)
def test_tp_group_kv_capacity_is_one_gpus_share_of_the_heads(
    gpu: str, model: str, tp: int, usable: float, weights: float, overhead: float, per_gpu: int
) -> None:
    pod = pod_profile(gpu, model, tp=tp)
    assert pod.kv_capacity_tokens == tp_group_tokens(usable, weights, tp, overhead, per_gpu)


def test_kv_heads_are_replicated_not_split_below_one_per_gpu() -> None:
    m = model_profiles()["qwen3-235b-a22b"]
    assert [m.kv_heads_per_gpu(tp) for tp in (1, 2, 4, 8)] == [4, 2, 1, 1]
    assert m.kv_bytes_per_token_per_gpu(8) == m.kv_bytes_per_token // 4


@pytest.mark.parametrize(
    ("gpu", "model", "tp", "expected"),
    [
        # FP8 checkpoint 220.15 GiB / 8 = 27.52 GiB per A10G, above its 20.12 usable
        ("A10G", "qwen3-235b-a22b-fp8", 8, ["g5.48xlarge", "20.12 GiB", "220.15 / 8 = 27.52"]),
        # BF16 437.90 / 4 = 109.47 GiB per H100
        ("H100", "qwen3-235b-a22b", 4, ["p5.48xlarge", "437.90 / 4 = 109.47", "up to 8"]),
        ("A10G", "qwen3-32b", 1, ["g5.2xlarge", "61.03 / 1 = 61.03"]),
        ("A10G", "llama-3.1-8b", 16, ["g5.48xlarge has 8 GPUs"]),
    ],
)
def test_a_model_that_does_not_fit_is_refused_with_the_arithmetic(
    gpu: str, model: str, tp: int, expected: list[str]
) -> None:
    with pytest.raises(ConfigError) as error:
        pod_profile(gpu, model, tp=tp)
    message = " ".join(error.value.problems)
    for fragment in expected:
        assert fragment in message


def test_a_pod_costs_its_share_of_the_instance() -> None:
    """[A1]: p5.48xlarge 55.04 $/h for 8 GPUs, g5.12xlarge 5.672 for 4, g5.48xlarge 16.288."""
    assert pod_profile("H100", "llama-3.1-70b", tp=4).hourly_usd == pytest.approx(55.04 / 2)
    assert pod_profile("A10G", "qwen3-32b", tp=4).hourly_usd == pytest.approx(5.672)
    assert pod_profile("A10G", "llama-3.1-70b", tp=8).hourly_usd == pytest.approx(16.288)
    assert pod_profile("H100", "llama-3.1-8b").hourly_usd == pytest.approx(6.88)


def test_tp_decode_step_adds_the_all_reduce_over_the_interconnect() -> None:
    """One decode token of 70B on 4 H100s: weights over 4 GPUs' bandwidth, plus per layer
    two all-reduces of 8192 x 2 bytes over NVLink (370 GB/s busbw, 10 us each)."""
    engine = Engine(pod_profile("H100", "llama-3.1-70b", tp=4))
    weights = 131.4 * GIB / (3350e9 * 0.80 * 4)
    kv = 1000 * kv_bytes(80, 2) / (3350e9 * 0.80)
    allreduce = 80 * 2 * (10e-6 + 2 * 3 / 4 * 8192 * 2 / 370e9)
    expected = 0.5e-3 + allreduce + weights + kv
    assert engine.step_time(0, 0, 1, 1000) == pytest.approx(expected, rel=1e-9)


def test_pcie_all_reduce_costs_more_per_token_than_nvlink() -> None:
    nvlink = Engine(pod_profile("H100", "llama-3.1-70b", tp=8))
    pcie = Engine(pod_profile("A10G", "llama-3.1-70b", tp=8))
    assert pcie._t_allreduce_token > 10 * nvlink._t_allreduce_token
    assert pcie._t_overhead > nvlink._t_overhead


def test_moe_reads_only_the_experts_its_tokens_route_to() -> None:
    """Batch 1 reads the dense part and 8/128 of the experts; a large batch reads them all;
    compute follows the 22.19 B active parameters, at the H100's FP8 peak for FP8."""
    engine = Engine(pod_profile("H100", "qwen3-235b-a22b-fp8", tp=4))
    bandwidth = 3350e9 * 0.80 * 4
    dense, experts = (220.15 - 211.5) * GIB, 211.5 * GIB
    assert engine.weight_read_time(1) == pytest.approx((dense + experts * 8 / 128) / bandwidth)
    assert engine.weight_read_time(4096) == pytest.approx((dense + experts) / bandwidth, rel=1e-6)
    assert engine._t_prefill_token == pytest.approx(2 * 22.19e9 / (1979e12 * 4 * 0.45))
    dense_engine = Engine(pod_profile("H100", "llama-3.1-70b", tp=4))
    assert dense_engine.weight_read_time(1) == dense_engine.weight_read_time(4096)
