"""Model routing, canary splits, flow control and rate limits (no I/O)."""

from .routing import ModelRouter, Route

__all__ = ["ModelRouter", "Route"]
