"""Starting prefill speeds per GPU class: the TTFT predictor's prior before it has
measured a pod.

Seconds per prefill token of an 8B-class model (Llama 3.1 8B, bf16): 2 × 8.03e9 FLOPs per
token over the card's dense bf16 peak times the prefill utilisation vLLM reaches on it.
Only the ratios between classes matter (a pod's own TTFTs replace the prior after a few
requests), so one model's figures serve every model. The table is routing's own: the
emulator's GPU profiles are checked against it by a test, never imported here.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

__all__ = ["GPU_SECONDS_PER_PREFILL_TOKEN", "gpu_priors"]

GPU_SECONDS_PER_PREFILL_TOKEN: Mapping[str, float] = MappingProxyType(
    {
        "H100": 3.607e-05,
        "A100": 1.355e-04,
        "A10G": 7.170e-04,
        "L4": 4.148e-04,
        "A40": 3.353e-04,
    }
)


def gpu_priors() -> dict[str, float]:
    """A copy of the shipped table (GPU class → seconds per prefill token)."""
    return dict(GPU_SECONDS_PER_PREFILL_TOKEN)
