"""Benchmark: how fast `igw simulate` runs one simulated hour of a 64-pod fleet.

The shipped `fleet-64-hour` scenario (64 H100 pods of an 8B model, Poisson arrivals at
80 % of capacity, one simulated hour, about 1.4 million requests, round-robin) runs in a
child process, as a user runs it: wall time, the child's CPU time, requests simulated
per wall second. Then, side by side in the same run, a slice of the same scenario
(`--slice-s` simulated seconds) runs twice, once with the compiled modules
(`make native`) and once with the sources (`IGW_NATIVE=0`): their ratio is what the
compiled build buys on this machine, and both give the same JSON (checked here too).

    python bench/simulator_speed.py [--slice-s 300] [--skip-hour] [--json]

A benchmark, not a test: wall time depends on what else the machine runs (the load
average is reported; CPU time is the steadier figure on a busy machine).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from inference_gateway import native

SCENARIO = "fleet-64-hour"


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def simulate(scenario: str, **env: str) -> dict[str, Any]:
    """One `igw simulate --json` in a child process: its result, wall and CPU seconds."""
    cpu, start = children_cpu_s(), time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "inference_gateway.cli.main", "simulate", scenario, "--json"],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        check=True,
    )
    wall = time.perf_counter() - start
    result = json.loads(proc.stdout)
    completed = sum(p["completed"] for p in result["policies"].values())
    return {
        "result": result,
        "wall_s": round(wall, 2),
        "cpu_s": round(children_cpu_s() - cpu, 2),
        "requests": completed,
        "requests_per_wall_s": round(completed / wall),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--slice-s", type=float, default=300, help="simulated seconds")
    parser.add_argument("--skip-hour", action="store_true", help="only the side-by-side slice")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    modules = native.status()
    log = (lambda *a: None) if args.json else (lambda *a: print(*a, file=sys.stderr))
    figures: dict[str, Any] = {"modules": modules, "host": {"cpus": os.cpu_count()}}
    if not args.skip_hour:
        log(f"{SCENARIO}: one simulated hour ({modules} modules) ...")
        hour = simulate(SCENARIO)
        figures["hour"] = {k: v for k, v in hour.items() if k != "result"}
        log(f"  {hour['wall_s']} s wall, {hour['cpu_s']} s CPU, {hour['requests']} requests")

    shipped = resources.files("inference_gateway.sim").joinpath(f"scenarios/{SCENARIO}.yaml")
    spec = yaml.safe_load(shipped.read_text())
    spec["duration_s"] = args.slice_s
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "slice.yaml"
        path.write_text(yaml.safe_dump(spec))
        log(f"slice of {args.slice_s:.0f} simulated s: sources, then compiled ...")
        sources = simulate(str(path), IGW_NATIVE="0")
        compiled = simulate(str(path)) if modules == "compiled" else None
    figures["slice"] = {
        "simulated_s": args.slice_s,
        "requests": sources["requests"],
        "sources_wall_s": sources["wall_s"],
        "sources_cpu_s": sources["cpu_s"],
    }
    if compiled is not None:
        figures["slice"] |= {
            "compiled_wall_s": compiled["wall_s"],
            "compiled_cpu_s": compiled["cpu_s"],
            "speedup_cpu": round(sources["cpu_s"] / compiled["cpu_s"], 2),
            "identical_results": compiled["result"] == sources["result"],
        }
    figures["host"]["loadavg"] = [round(x, 2) for x in os.getloadavg()]
    if args.json:
        print(json.dumps(figures))
    else:
        print(json.dumps(figures, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
