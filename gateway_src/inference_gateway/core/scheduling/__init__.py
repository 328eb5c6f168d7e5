"""Endpoint picking: filters, scorers, pickers and profiles (no I/O, no web framework)."""

from inference_gateway.core.scheduling.gpu_priors import gpu_priors
from inference_gateway.core.scheduling.scheduler import Scheduler
from inference_gateway.core.scheduling.types import Endpoint, LLMRequest, PodMetrics

__all__ = ["Endpoint", "LLMRequest", "PodMetrics", "Scheduler", "gpu_priors"]
