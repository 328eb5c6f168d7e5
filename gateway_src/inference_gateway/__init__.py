"""GPU-aware inference gateway: endpoint picker, proxy, emulator and fleet simulator."""

__version__ = "0.1.0"
