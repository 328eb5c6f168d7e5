"""Reusable constructs; each stack in `stacks/` is a thin shell over one of these."""
