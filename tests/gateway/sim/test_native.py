"""The mypyc-compiled simulator modules: the sources' results exactly, and never stale.

The comparison tests need `make native` to have built the extensions (as `make test` and
CI do); on a machine without them they skip, saying so.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from inference_gateway import native

# Overloaded on purpose: KV pressure preempts, adapters swap, prefixes hit, bands queue.
STRESS = """
name: native-equivalence
seed: 11
duration_s: 40
fleet:
  - {name: h100, gpu: H100, model: llama-3.1-8b, replicas: 2, max_loras: 2,
     adapters: [sql, chat, code]}
  - {name: a10g, gpu: A10G, model: llama-3.1-8b, replicas: 2, max_loras: 2,
     adapters: [sql, chat, code]}
workload:
  arrival: {kind: bursty, load: 1.3, burst_factor: 3, burst_s: 10, period_s: 20}
  prompt_tokens: {dist: lognormal, median: 3000, sigma: 0.9, max: 16000}
  output_tokens: {dist: lognormal, median: 400, sigma: 0.7, max: 3000}
  shared_prefixes: {share: 0.5, groups: 4, tokens: 1500}
  adapters: {share: 0.4, names: [sql, chat, code], zipf: 1.0}
  priorities: {critical: 0.2, standard: 0.5, sheddable: 0.3}
policies: [round-robin, least-outstanding, gateway, oracle]
"""

compiled_only = pytest.mark.skipif(
    native.status() != "compiled", reason="`make native` has not built the extensions here"
)


def _simulate(scenario: Path, **env: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-m", "inference_gateway.cli.main", "simulate", str(scenario), "--json"],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    return json.loads(out.stdout)


def _engine_file(**env: str) -> str:
    code = "import inference_gateway.emulator.engine as m; print(m.__file__)"
    return subprocess.run(
        [sys.executable, "-c", code], env={**os.environ, **env}, capture_output=True, text=True
    ).stdout.strip()


@compiled_only
def test_compiled_and_source_modules_give_identical_results(tmp_path: Path) -> None:
    scenario = tmp_path / "stress.yaml"
    scenario.write_text(STRESS)
    compiled = _simulate(scenario)
    sources = _simulate(scenario, IGW_NATIVE="0")
    assert compiled == sources
    assert compiled["policies"]["round-robin"]["completed"] > 0


@compiled_only
def test_igw_native_0_runs_the_sources() -> None:
    assert _engine_file().endswith(".so")
    assert _engine_file(IGW_NATIVE="0").endswith("engine.py")


def test_status_follows_the_manifest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("IGW_NATIVE", raising=False)
    manifest = tmp_path / "manifest.json"
    monkeypatch.setattr(native, "MANIFEST", manifest)
    monkeypatch.setattr(native, "_extensions", lambda: [])
    assert native.status() == "python"
    monkeypatch.setattr(native, "_extensions", lambda: [tmp_path / "engine.so"])
    assert native.status() == "stale"  # extensions without a manifest: built by hand
    current = {m: native._digest(native._source(m)) for m in native.MODULES}
    manifest.write_text(json.dumps(current))
    assert native.status() == "compiled"
    edited = dict(current, **{native.MODULES[0]: "0" * 64})
    manifest.write_text(json.dumps(edited))
    assert native.status() == "stale"
    monkeypatch.setenv("IGW_NATIVE", "0")
    assert native.status() == "off"


def test_sources_first_finder_imports_the_py_file() -> None:
    finder = native._SourcesFirst(native.MODULES)
    spec = finder.find_spec("inference_gateway.emulator.engine", None)
    assert spec is not None and spec.origin is not None
    assert Path(spec.origin) == native._source("inference_gateway.emulator.engine")
    assert finder.find_spec("json", None) is None
