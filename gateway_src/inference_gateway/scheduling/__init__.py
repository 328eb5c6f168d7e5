"""Endpoint picking: filters, scorers, pickers and profiles (no I/O, no web framework)."""

from .gpu_priors import gpu_priors
from .scheduler import Scheduler
from .types import Endpoint, LLMRequest, PodMetrics

__all__ = ["Endpoint", "LLMRequest", "PodMetrics", "Scheduler", "gpu_priors"]
