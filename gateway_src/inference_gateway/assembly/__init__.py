"""Builds the core once for each driver: `igw serve` and `igw picker`."""
