"""GPU-aware inference gateway: endpoint picker, proxy, emulator and fleet simulator."""

from inference_gateway import native

__version__ = "0.1.0"

native.guard()  # never let a stale compiled module shadow an edited source
