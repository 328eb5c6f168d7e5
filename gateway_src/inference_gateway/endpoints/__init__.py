"""Endpoint discovery, engine metric scraping and the endpoint store."""

from .adapters import parse_metrics
from .discovery import load_endpoints_file
from .store import EndpointStore

__all__ = ["EndpointStore", "load_endpoints_file", "parse_metrics"]
