"""Engine adapters: Prometheus text of vLLM, SGLang, TRT-LLM or TGI → `PodMetrics`.

Metric names (DESIGN §3):

  vLLM     queue vllm:num_requests_waiting, running vllm:num_requests_running,
           KV vllm:kv_cache_usage_perc (older: vllm:gpu_cache_usage_perc)
  SGLang   sglang:num_queue_reqs, sglang:num_running_reqs, sglang:token_usage
  TRT-LLM  trtllm_num_requests_waiting, trtllm_num_requests_running,
           trtllm_kv_cache_utilization
  TGI      tgi_queue_size, tgi_batch_current_size (no KV gauge)

vLLM also gives LoRA residency (`vllm:lora_requests_info` labels) and cache geometry
(`vllm:cache_config_info`), SGLang its cache geometry (`sglang:cache_config_info`).
"""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from ..scheduling.types import PodMetrics

__all__ = ["ENGINES", "parse_metrics"]

ENGINES = {
    "vllm": {
        "waiting": ["vllm:num_requests_waiting"],
        "running": ["vllm:num_requests_running"],
        "kv": ["vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"],
    },
    "sglang": {
        "waiting": ["sglang:num_queue_reqs"],
        "running": ["sglang:num_running_reqs"],
        "kv": ["sglang:token_usage"],
    },
    "trtllm": {
        "waiting": ["trtllm_num_requests_waiting"],
        "running": ["trtllm_num_requests_running"],
        "kv": ["trtllm_kv_cache_utilization"],
    },
    "tgi": {
        "waiting": ["tgi_queue_size"],
        "running": ["tgi_batch_current_size"],
        "kv": [],
    },
}


def _split(value: str | None) -> frozenset[str]:
    return frozenset(a for a in (value or "").split(",") if a)


def parse_metrics(text: str, engine: str = "vllm") -> PodMetrics:
    """Parse one scrape. Missing metrics read as 0; unknown engines are a ValueError."""
    names = ENGINES.get(engine)
    if names is None:
        raise ValueError(f"unknown engine {engine!r} (known: {sorted(ENGINES)})")
    values: dict[str, float] = {}
    lora_labels: dict[str, str] | None = None
    lora_stamp = float("-inf")
    cache_labels: dict[str, str] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            name = sample.name
            if name == "vllm:lora_requests_info":
                if sample.value >= lora_stamp:  # newest timestamp wins, as upstream
                    lora_stamp, lora_labels = sample.value, sample.labels
            elif name in ("vllm:cache_config_info", "sglang:cache_config_info"):
                cache_labels = sample.labels
            elif name not in values:
                values[name] = sample.value

    def first(keys: list[str]) -> float:
        return next((values[k] for k in keys if k in values), 0.0)

    block_size = cache_labels.get("block_size") or cache_labels.get("page_size") or "16"
    blocks = cache_labels.get("num_gpu_blocks") or cache_labels.get("num_pages") or "0"
    return PodMetrics(
        waiting=int(first(names["waiting"])),
        running=int(first(names["running"])),
        kv_usage=float(first(names["kv"])),
        running_adapters=_split((lora_labels or {}).get("running_lora_adapters")),
        waiting_adapters=_split((lora_labels or {}).get("waiting_lora_adapters")),
        max_loras=int(float((lora_labels or {}).get("max_lora") or 0)),
        block_size=int(float(block_size)),
        num_gpu_blocks=int(float(blocks)),
    )
