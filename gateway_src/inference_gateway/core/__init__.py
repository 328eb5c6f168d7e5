"""The routing core: scheduling, traffic, endpoints and request control, with no I/O."""
