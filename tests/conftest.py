"""Shared test setup: tests only ever talk to loopback."""
