"""Endpoint picking: filters, scorers, pickers and profiles (no I/O, no web framework)."""

from .scheduler import Scheduler, gpu_priors
from .types import Endpoint, LLMRequest, PodMetrics

__all__ = ["Endpoint", "LLMRequest", "PodMetrics", "Scheduler", "gpu_priors"]
