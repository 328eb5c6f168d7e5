"""Discrete-event fleet simulation over the emulator's engine model."""
