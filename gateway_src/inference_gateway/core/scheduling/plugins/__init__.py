"""Scheduling plugins, one module each. `registry` builds them by upstream type name."""
