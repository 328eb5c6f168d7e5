"""The emulator against published serving figures: batch-1 decode and saturated throughput.

    .venv/bin/python bench/emulator_speed_check.py [--json]

Every mixed-fleet result rests on the emulated speed ratio between GPU kinds, so this
script runs the emulator's engine (`sim.capacity.closed_loop`: N requests in flight,
each finished one replaced at once, as a benchmark client with `--max-concurrency` does)
on the request shape a published figure states, and prints emulated / published. A ratio
outside 0.75-1.25 is flagged; docs/benchmarks.md says which constant was fixed or why a
flagged ratio stays. Sources are the tags of shared/PROFILES-FACTS.md plus [S1]:

* [P1] yobitelcomm.github.io/bench/recipes/concurrency-sweep (vLLM 0.21, H100 80GB)
* [P3] github vllm-project/vllm PR #18566 (2025-05-22): `vllm serve` defaults, ShareGPT
  1,000 prompts at rate inf through the chat endpoint: 229,711 in / 203,068 out tokens in
  30.85 s, 6,582.87 output tok/s (GPU not stated in the PR)
* [P4] github arc53/llm-price-compass issue #6: g5.12xlarge, 2x A10G TP2, Llama-3-8B,
  ShareGPT 1,000 prompts, rate inf: 441.8 output + 2,203.6 input tok/s (community report,
  2024; its prompts are 5x its outputs, so total tokens/s is what compares)
* [V2] github vllm-project/vllm issue #17788: one H100 NVL (94 GB, 3.9 TB/s), Qwen3-32B
  BF16, `--max-num-seqs 32`, ShareGPT 1,000 prompts at rate inf: 217,393 in / 200,516 out
  tokens in 306.78 s, 653.61 output tok/s (vLLM 0.8.5; our H100 is the SXM part, 3.35 TB/s)
* [S1] databasemart.com/blog/vllm-gpu-benchmark-a40: A40, vLLM, one wave of 50 requests of
  100 input / up to 600 output tokens (22,170 generated: 443 mean) in 21.81 s, 1,016.6
  output tok/s, median TPOT 35.96 ms
* [L1] https://github.com/llm-d/llm-d-inference-sim/blob/main/docs/latency-profiles.md:
  the llm-d project's vLLM latency profiles, 70B TP4 on H100 inter-token latency 25-40 ms (profile
  parameters, not a measurement; its H100-8B figure is 2x the measured [P1])

Deterministic: no clocks, only the engine's virtual time.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from typing import Any

from inference_gateway.emulator.profiles import pod_profile
from inference_gateway.sim.capacity import closed_loop
from inference_gateway.sim.scenario import Workload
from inference_gateway.sim.workload import sample_requests

TOLERANCE = 0.25

# ShareGPT as vLLM's benchmark samples it ([P3]: 229.7 prompt and 203.1 output tokens per
# request): lognormals with those means (sigma 0.9 / 0.8, the spread of chat traffic).
SHAREGPT = {
    "prompt_tokens": {"dist": "lognormal", "median": 153, "sigma": 0.9, "max": 4000},
    "output_tokens": {"dist": "lognormal", "median": 147, "sigma": 0.8, "max": 2000},
}
WAVE = 1000  # prompts per one-shot (rate inf) benchmark


@dataclass(frozen=True)
class Check:
    name: str
    gpu: str
    model: str
    tp: int
    shape: dict[str, Any]
    concurrency: int  # requests in flight; a wave sends all `concurrency` at t = 0
    metric: str  # tpot_ms | output_tokens_per_s | total_tokens_per_s
    published: float
    source: str
    wave: bool = False
    max_num_seqs: int | None = None


def _fixed(prompt: int, output: int) -> dict[str, Any]:
    return {
        "prompt_tokens": {"dist": "fixed", "value": prompt},
        "output_tokens": {"dist": "fixed", "value": output},
    }


CHECKS = [
    Check("8B batch-1 TPOT", "H100", "llama-3.1-8b", 1, _fixed(256, 256), 1,
          "tpot_ms", 6.48, "[P1] concurrency 1, short chat"),
    Check("8B ShareGPT wave, output tok/s", "H100", "llama-3.1-8b", 1, SHAREGPT, WAVE,
          "output_tokens_per_s", 6582.87, "[P3] vLLM PR #18566 (GPU not stated)", wave=True),
    Check("8B TPOT at 50 in flight", "A40", "llama-3.1-8b", 1, _fixed(100, 443), 50,
          "tpot_ms", 35.96, "[S1] A10G's die class (GA102)"),
    Check("8B 50-request wave, output tok/s", "A40", "llama-3.1-8b", 1, _fixed(100, 443), 50,
          "output_tokens_per_s", 1016.6, "[S1] A10G's die class (GA102)", wave=True),
    Check("8B ShareGPT wave, total tok/s", "A10G", "llama-3.1-8b", 2, SHAREGPT, WAVE,
          "total_tokens_per_s", 2645.4, "[P4] g5.12xlarge, community, 2024", wave=True),
    Check("Qwen3-32B ShareGPT wave, 32 seqs", "H100", "qwen3-32b", 1, SHAREGPT, WAVE,
          "output_tokens_per_s", 653.61, "[V2] vLLM issue #17788 (H100 NVL)", wave=True,
          max_num_seqs=32),
    Check("70B batch-1 ITL", "H100", "llama-3.1-70b", 4, _fixed(256, 256), 1,
          "tpot_ms", 32.5, "[L1] llm-d profile 25-40 ms (mid-range)"),
]  # fmt: skip


def run_check(check: Check) -> dict[str, Any]:
    profile = pod_profile(check.gpu, check.model, tp=check.tp, max_num_seqs=check.max_num_seqs)
    workload = Workload.model_validate({"arrival": {"kind": "poisson", "load": 1}, **check.shape})
    n = check.concurrency if check.wave else max(400, 4 * check.concurrency)
    requests = sample_requests(workload, n, seed=0)
    loop = closed_loop(profile, requests, check.concurrency, wave=check.wave)
    value = loop.tpot_s * 1000 if check.metric == "tpot_ms" else getattr(loop, check.metric)
    ratio = value / check.published
    return {
        "check": check.name,
        "pod": profile.name,
        "metric": check.metric,
        "concurrency": check.concurrency,
        "wave": check.wave,
        "emulated": round(value, 2),
        "published": check.published,
        "ratio": round(ratio, 3),
        "within_25pct": abs(ratio - 1) <= TOLERANCE,
        "source": check.source,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    args = parser.parse_args(argv)
    rows = [run_check(c) for c in CHECKS]
    if args.json:
        sys.stdout.write(json.dumps({"tolerance": TOLERANCE, "checks": rows}) + "\n")
        return 0
    for r in rows:
        flag = "" if r["within_25pct"] else "  <-- off by more than 25 %"
        print(
            f"{r['check']:34s} {r['pod']:28s} c={r['concurrency']:<5d} {r['metric']:20s} "
            f"emulated {r['emulated']:9.2f}  published {r['published']:9.2f}  "
            f"x{r['ratio']:.3f}{flag}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
