"""Optional compiled build of the simulator's hot modules (mypyc), and its stale guard.

A long simulation spends its time in a handful of pure-Python modules: the engine model,
the KV block pool, the event driver, the request sampler and the observer. `make venv`
compiles exactly those files with mypyc (part of mypy) into extension modules next to
their sources, and Python imports an extension in preference to the `.py`. The sources
stay the only truth: they are type-checked and compiled unchanged, and give identical
results (a test compares the two). Where no C compiler or mypy is at hand (the gateway's
container image), nothing is built and the same modules run as plain Python, about 1.5x
slower in `igw simulate`.

An extension built from an older source would silently shadow an edited `.py`, so the
build records each source's SHA-256 in a manifest, and `guard()` (run when the package is
imported) compares it with the files on disk: on any mismatch the sources are imported
instead, with one warning naming the command that rebuilds.

    make native                 # compile in place (mypy from requirements/native.txt, gcc)
    IGW_NATIVE=0 igw simulate   # run the sources anyway (profilers see into them)
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

__all__ = ["MODULES", "build", "clean", "guard", "status"]

PACKAGE_DIR = Path(__file__).resolve().parent
SOURCE_ROOT = PACKAGE_DIR.parent
MANIFEST = PACKAGE_DIR / "_native_manifest.json"
GROUP = "inference_gateway._native"  # the shared library lives inside the package
MODULES = (
    "inference_gateway.emulator.engine",
    "inference_gateway.emulator.kvcache",
    "inference_gateway.sim.driver",
    "inference_gateway.sim.metrics",
    "inference_gateway.sim.workload",
)
REBUILD = "make native"


def _source(module: str) -> Path:
    return SOURCE_ROOT / (module.replace(".", "/") + ".py")


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _extensions() -> list[Path]:
    suffixes = tuple(importlib.machinery.EXTENSION_SUFFIXES)
    found = [p for m in MODULES for p in _source(m).parent.glob(_source(m).stem + ".*")]
    found += PACKAGE_DIR.glob(GROUP.rpartition(".")[2] + "__mypyc.*")
    return sorted(p for p in found if p.name.endswith(suffixes))


def status() -> str:
    """`compiled`, `stale` (sources changed since the build), `off` (IGW_NATIVE=0) or `python`."""
    if not _extensions():
        return "python"
    if os.environ.get("IGW_NATIVE") == "0":
        return "off"
    try:
        recorded = json.loads(MANIFEST.read_text())
    except (OSError, ValueError):
        return "stale"
    current = {m: _digest(_source(m)) for m in MODULES}
    return "compiled" if recorded == current else "stale"


class _SourcesFirst(importlib.abc.MetaPathFinder):
    """Imports the listed modules from their `.py` files, whatever lies next to them."""

    def __init__(self, names: Sequence[str]) -> None:
        self.names = frozenset(names)

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in self.names:
            return None
        return importlib.util.spec_from_file_location(fullname, _source(fullname))


def guard() -> None:
    """Import the sources instead of stale or disabled extensions (run on package import)."""
    state = status()
    if state not in ("stale", "off") or any(isinstance(f, _SourcesFirst) for f in sys.meta_path):
        return
    sys.meta_path.insert(0, _SourcesFirst(MODULES))
    if state == "stale":
        warnings.warn(
            f"compiled simulator modules are older than their sources; running the sources "
            f"(slower) until you run {REBUILD}",
            RuntimeWarning,
            stacklevel=2,
        )


def clean() -> None:
    for path in _extensions():
        path.unlink()
    MANIFEST.unlink(missing_ok=True)


def build() -> None:
    """Compile MODULES in place with mypyc; record their sources' hashes."""
    import tempfile

    from mypyc.build import mypycify
    from setuptools import Distribution

    clean()
    flags = ["--follow-imports=silent", "--ignore-missing-imports"]
    paths = [str(_source(m).relative_to(SOURCE_ROOT)) for m in MODULES]
    cwd = os.getcwd()
    os.chdir(SOURCE_ROOT)  # mypyc names modules after their paths from here
    try:
        with tempfile.TemporaryDirectory() as tmp:
            extensions = mypycify([*flags, *paths], group_name=GROUP, target_dir=tmp)
            dist = Distribution({"name": "inference-gateway-native", "ext_modules": extensions})
            command = dist.get_command_obj("build_ext")
            command.inplace = True
            command.build_temp = command.build_lib = tmp
            dist.run_command("build_ext")
    finally:
        os.chdir(cwd)
    MANIFEST.write_text(json.dumps({m: _digest(_source(m)) for m in MODULES}, indent=1) + "\n")
