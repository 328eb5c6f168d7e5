"""Endpoint discovery, engine metric scraping and the endpoint store."""

from inference_gateway.core.endpoints.adapters import parse_metrics
from inference_gateway.core.endpoints.discovery import load_endpoints_file
from inference_gateway.core.endpoints.store import EndpointStore

__all__ = ["EndpointStore", "load_endpoints_file", "parse_metrics"]
