"""`make bench`: the routing benchmark matrix, written to bench/results/latest/.

    .venv/bin/python bench/run.py [--quick] [--jobs N] [--only KIND,...] [--out DIR] [--json]

Runs every case of `matrix.build_matrix()` (shipped scenarios under all policies, load
sweeps, a 256-pod fleet, scrape-interval sensitivity, several gateway replicas) in
worker processes, one (case, policy) simulation per job, longest first. Then runs the
other overhead benchmarks in this folder when they exist (`<script> --json`, one JSON
object on stdout; a missing or failing script is recorded, never fatal), evaluates the
must-hold checks, and writes:

* `results.json` — every figure; schema `igw-bench/1` (docs/benchmarks.md). Everything
  under `cases`, `checks` and `published` depends only on the code and the seeds; timings
  and host facts live under `run` and `overhead`.
* `summary.md` — the tables of docs/benchmarks.md;
* `report.html` — the same with charts (TTFT CDFs, P99 versus load, scrape interval,
  replicas, overhead).

Progress goes to stderr. Exit status 0 even when a check fails (the checks are findings
to read, not a gate); 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from matrix import CHECKS, PEERS, PUBLISHED, QUANTILES, Case, build_matrix  # noqa: E402

SCHEMA = "igw-bench/1"
OVERHEAD_SCRIPTS = ["picker_throughput", "gateway_overhead", "emulator_streams", "simulator_speed"]
OVERHEAD_SCRIPTS += ["emulator_speed_check"]  # the emulator against published serving figures
OVERHEAD_SCRIPTS += ["scrape_cost"]  # a real-size vLLM page's parse; idle picker at 4/32/128 pods
OVERHEAD_SCRIPTS += ["kv_events"]  # KV-event ingest CPU, index memory, precise vs approximate pick
OVERHEAD_TIMEOUT_S = {"kv_events": 240}  # old and new index side by side, ~115k-token picks
OVERHEAD_SCRIPTS += ["kv_events_hostile"]  # a hostile KV-event publisher: /health and RSS
OVERHEAD_TIMEOUT_S["simulator_speed"] = 400  # one simulated hour plus a side-by-side slice
OVERHEAD_TIMEOUT_S["scrape_cost"] = 300  # nine idle pickers (4, 32, 128 pods; three paths)
OVERHEAD_TIMEOUT_S["gateway_overhead"] = 240  # open loop, picker, closed loop (3 paths)
# the in-cluster path through real Envoy 1.40: five paths side by side, 3 repeats, and the
# demo's fleet and trace through Envoy + picker and Envoy round robin (bench/envoy_path.py)
OVERHEAD_SCRIPTS += ["envoy_path"]
OVERHEAD_TIMEOUT_S["envoy_path"] = 420
# the picker over a synthetic fleet of 32-1,024 pods publishing KV events, 1-100 pools, one
# replica or 2 and 4 sharing a redis-server: cores, RSS, view age, decision latency, KV
# ingest (bench/scale.py: sixteen points of seconds each, warm-up bounded per point)
OVERHEAD_SCRIPTS += ["scale"]
OVERHEAD_TIMEOUT_S["scale"] = 600
# resume on break (issue 33): a pod killed mid-stream under igw serve, and a cluster lost
# whole behind igw global, the resume gap against a fresh TTFT at the same load;
# migration on vs off when nothing breaks
OVERHEAD_SCRIPTS += ["migration"]
OVERHEAD_TIMEOUT_S["migration"] = 300
# a slow or silent pod among 32: the other pods' view age against none slow (bench/slow_pod.py)
OVERHEAD_SCRIPTS += ["slow_pod"]
DEFAULT_OVERHEAD_TIMEOUT_S = 120


def _job(case: Case, policy: str) -> tuple[str, str, float, dict[str, Any], float]:
    from inference_gateway.sim.capacity import fleet_capacity
    from inference_gateway.sim.driver import run_policy

    s = case.scenario
    capacity = fleet_capacity(s.fleet, s.workload, s.seed)
    start = time.process_time()
    # the TTFT quantiles the CDF charts draw, kept by the simulator itself (a worker that
    # swapped the driver's observer class went unseen by the compiled driver)
    report = run_policy(s, policy, capacity, ttft_quantiles=QUANTILES)
    return case.id, policy, capacity, report, time.process_time() - start


def run_matrix(
    cases: list[Case], jobs: int, quick: bool = False
) -> tuple[dict[str, Any], dict[str, float]]:
    """Every (case, policy) simulation; returns (cases, CPU seconds per job). Each case
    says whether it ran at quick durations, so a merged document keeps saying which."""
    work = sorted(
        ((c, p) for c in cases for p in c.policies),
        key=lambda cp: -cp[0].weight * (3 if cp[1].startswith(("gateway", "upstream")) else 1),
    )
    out: dict[str, Any] = {}
    cpu: dict[str, float] = {}
    for case in cases:
        s = case.scenario
        out[case.id] = {
            "kind": case.kind,
            "scenario": s.name,
            "seed": s.seed,
            "duration_s": s.duration_s,
            "pods": sum(p.replicas for p in s.fleet),
            "scrape_interval_ms": s.scrape_interval_ms,
            "params": case.params,
            "quick": quick,
            "capacity_rps": None,
            "policies": {},
        }
    start = time.monotonic()
    done = 0
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        futures = [pool.submit(_job, c, p) for c, p in work]
        for future in as_completed(futures):
            case_id, policy, capacity, report, seconds = future.result()
            done += 1
            out[case_id]["capacity_rps"] = round(capacity, 3)
            out[case_id]["policies"][policy] = report
            cpu[f"{case_id}|{policy}"] = round(seconds, 2)
            elapsed = time.monotonic() - start
            print(
                f"[{done:3d}/{len(work)}] {elapsed:6.0f}s  {case_id:40s} {policy:30s} "
                f"P99 TTFT {report['ttft_p99_s']:10.3f} s  ({seconds:.1f} CPU-s)",
                file=sys.stderr,
                flush=True,
            )
    for case in cases:  # policies in matrix order, whatever order they finished in
        entry = out[case.id]
        entry["policies"] = {p: entry["policies"][p] for p in case.policies}
    return out, cpu


def evaluate_checks(cases: dict[str, Any]) -> list[dict[str, Any]]:
    """The must-hold claims of issue 6, each with its figures and a verdict.

    A P99 over fewer completed requests is no win: a check also fails when the gateway
    side rejected more requests than the side it is compared with."""
    results = []
    for check, scenario, rule in CHECKS:
        entry = cases.get(f"scenario/{scenario}")
        if entry is None:
            continue
        gateway = entry["policies"]["gateway"]["ttft_p99_s"]
        rejected = entry["policies"]["gateway"]["rejected"]
        if rule == "pd":
            results.append(_pd_check(check, scenario, entry["policies"]))
            continue
        if rule.startswith("replicas"):
            _, n, limit = rule.split(":")
            other = cases.get(f"replicas/{scenario}", {}).get("policies", {}).get(f"gateway@{n}")
            if other is None:
                continue
            value = other["ttft_p99_s"]
            ratio = value / gateway
            results.append(
                {
                    "check": check,
                    "scenario": scenario,
                    "rule": f"gateway@{n} P99 TTFT <= {limit} x gateway P99 TTFT",
                    "figure": "ttft_p99_s",
                    "gateway_p99_s": gateway,
                    "gateway_rejected": rejected,
                    "reference": f"gateway@{n}",
                    "reference_p99_s": value,
                    "reference_rejected": other["rejected"],
                    "ratio": round(ratio, 4),
                    "pass": ratio <= float(limit) and other["rejected"] <= max(rejected, 0),
                }
            )
            continue
        peers = {p: entry["policies"][p]["ttft_p99_s"] for p in PEERS if p in entry["policies"]}
        best = min(peers, key=peers.__getitem__)
        ratio = gateway / peers[best]
        limit = 1.0 if rule == "beat" else float(rule.split(":")[1])
        results.append(
            {
                "check": check,
                "scenario": scenario,
                "rule": "gateway P99 TTFT < every peer's"
                if rule == "beat"
                else f"gateway P99 TTFT <= {limit} x best peer's",
                "figure": "ttft_p99_s",
                "gateway_p99_s": gateway,
                "gateway_rejected": rejected,
                "reference": best,
                "reference_p99_s": peers[best],
                "reference_rejected": entry["policies"][best]["rejected"],
                "ratio": round(ratio, 4),
                "pass": (ratio < 1.0 if rule == "beat" else ratio <= limit)
                and rejected <= entry["policies"][best]["rejected"],
            }
        )
    return results


def _pd_check(check: str, scenario: str, policies: dict[str, Any]) -> dict[str, Any]:
    """Issue 25: gateway-pd against gateway on the same GPUs (`sim.disagg.pd_claim`)."""
    from inference_gateway.sim.disagg import pd_claim

    gateway, split = policies["gateway"], policies["gateway-pd"]
    claim = pd_claim(gateway, split)
    return {
        "check": check,
        "scenario": scenario,
        "rule": "gateway-pd P99 TPOT <= 0.5 x gateway's, P99 TTFT <= 1.2 x, tok/s >=",
        # the figure the ratio is of, so each number sits under its own column
        "figure": "tpot_p99_s",
        "gateway_p99_s": gateway["tpot_p99_s"],
        "gateway_rejected": gateway["rejected"],
        "reference": "gateway-pd",
        "reference_p99_s": split["tpot_p99_s"],
        "reference_rejected": split["rejected"],
        "ratio": claim["tpot_p99_ratio"],
        "pass": claim["pass"],
    }


HOMOGENEOUS_WITHIN = 1.05  # "about the same as round-robin": within 5 % (issue 17)


def _changes(ours: dict[str, Any], base: dict[str, Any]) -> dict[str, float | None]:
    """Relative change of TTFT quantiles and throughput (-0.97 = 97 % lower)."""

    def change(key: str) -> float | None:
        return round(ours[key] / base[key] - 1, 4) if base.get(key) else None

    return {
        "p50": change("ttft_p50_s"),
        "p95": change("ttft_p95_s"),
        "p99": change("ttft_p99_s"),
        "throughput": change("output_tokens_per_s"),
    }


def evaluate_published(cases: dict[str, Any]) -> list[dict[str, Any]]:
    """The published benchmark table row by row, beside our changes from this run: the
    gateway against round-robin and against the upstream picker's defaults, and the
    oracle against round-robin. `meets` says whether our change at the row's headline
    quantile is at least the published one (within 5 % of round-robin for the homogeneous
    row); None where the row has no figure or its scenario did not run."""
    rows = []
    for row in PUBLISHED:
        entry = cases.get(f"scenario/{row.scenario}")
        if entry is None:
            continue
        policies = entry["policies"]
        rr, gateway = policies.get("round-robin"), policies.get("gateway")
        if rr is None or gateway is None:
            continue
        upstream, oracle = policies.get("upstream-default"), policies.get("oracle")
        ours = _changes(gateway, rr)
        headline = row.headline if row.headline is not None else getattr(row, row.quantile)
        if headline is not None:
            meets = ours[row.quantile] is not None and ours[row.quantile] <= headline
        elif row.scenario == "homogeneous-steady":
            meets = gateway["ttft_p99_s"] <= HOMOGENEOUS_WITHIN * rr["ttft_p99_s"]
        else:
            meets = None
        rows.append(
            {
                "row": row.row,
                "scenario": row.scenario,
                "pods": entry["pods"],
                "duration_s": entry["duration_s"],
                "claim": row.claim,
                "published": {"p95": row.p95, "p99": row.p99, "throughput": row.throughput},
                "quantile": row.quantile,
                "published_headline": headline,
                "gateway_vs_round_robin": ours,
                "gateway_vs_upstream_default": _changes(gateway, upstream) if upstream else None,
                "oracle_vs_round_robin": _changes(oracle, rr) if oracle else None,
                "completed": {"gateway": gateway["completed"], "round-robin": rr["completed"]},
                "meets": meets,
                "why": row.why,
            }
        )
    return rows


def run_overhead(skip: bool) -> dict[str, Any]:
    """Figures from the other benchmark scripts here, when present."""
    out: dict[str, Any] = {}
    for name in OVERHEAD_SCRIPTS:
        path = HERE / f"{name}.py"
        if skip or not path.exists():
            out[name] = {"status": "skipped" if skip else "missing"}
            continue
        print(f"overhead: {name} --json ...", file=sys.stderr, flush=True)
        try:
            proc = subprocess.run(
                [sys.executable, str(path), "--json"],
                capture_output=True,
                text=True,
                timeout=OVERHEAD_TIMEOUT_S.get(name, DEFAULT_OVERHEAD_TIMEOUT_S),
                check=False,
            )
        except subprocess.TimeoutExpired:
            timeout = OVERHEAD_TIMEOUT_S.get(name, DEFAULT_OVERHEAD_TIMEOUT_S)
            out[name] = {"status": "timeout", "timeout_s": timeout}
            continue
        figures = _parse_json(proc.stdout)
        if proc.returncode != 0 or not isinstance(figures, dict):
            tail = (proc.stderr or proc.stdout or "").strip().splitlines()[-3:]
            out[name] = {"status": "failed", "returncode": proc.returncode, "tail": tail}
        else:
            out[name] = {"status": "ok", "figures": figures}
    return out


def _parse_json(stdout: str) -> Any:
    """The script's JSON object: all of stdout, or else its last line."""
    for text in (stdout, (stdout.strip().splitlines() or [""])[-1]):
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            continue
    return None


def _read_results(parser: argparse.ArgumentParser, flag: str, path: str) -> dict[str, Any]:
    """A results document, or one line naming the flag and the file, and exit 2."""
    problem = None
    try:
        document = json.loads(Path(path).read_text())
    except FileNotFoundError:
        problem = "no such file (`make bench` writes bench/results/latest/results.json)"
    except (OSError, ValueError) as error:
        problem = f"not a results document ({error})"
    else:
        if not isinstance(document, dict) or document.get("schema") != SCHEMA:
            problem = f"not a {SCHEMA} results document"
    if problem is not None:
        print(f"{parser.prog}: {flag} {path}: {problem}", file=sys.stderr)
        raise SystemExit(2)
    return document


def _git_commit() -> str | None:
    try:
        proc = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=HERE,
            capture_output=True,
            text=True,
            check=False,
        )
    except OSError:
        return None
    return proc.stdout.strip() or None


def _select(parser: argparse.ArgumentParser, args: argparse.Namespace) -> list[Case]:
    """The matrix's cases that --only and --cases keep."""
    cases = build_matrix(quick=args.quick)
    if args.only:
        kinds = {k.strip() for k in args.only.split(",")}
        unknown = kinds - {c.kind for c in cases}
        if unknown:
            parser.error(f"--only: unknown kinds {sorted(unknown)}")
        cases = [c for c in cases if c.kind in kinds]
    if args.cases:
        wanted = [w.strip() for w in args.cases.split(",") if w.strip()]
        cases = [c for c in cases if any(w in c.id for w in wanted)]
        if not cases:
            parser.error(f"--cases: no case id contains any of {wanted}")
    return cases


def _skips_overhead(args: argparse.Namespace) -> bool:
    """The overhead benchmarks (about 5 minutes) run with the whole matrix only, unless
    --overhead asks for them with --cases/--only too."""
    return bool(args.skip_overhead or ((args.cases or args.only) and not args.overhead))


def _dry_run(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """What the same command would do, on stdout; nothing is run, read or written."""
    if args.render:
        print(f"would re-evaluate the checks of {args.render} and write the reports to {args.out}")
        return 0
    cases = _select(parser, args)
    simulations = sum(len(c.policies) for c in cases)
    print(
        f"would run {len(cases)} case(s), {simulations} simulation(s) on {args.jobs} workers"
        + (" at durations / 4 (quick)" if args.quick else "")
    )
    if _skips_overhead(args):
        kept = f", keeping those of {args.merge}" if args.merge else ""
        print(f"would not run the overhead benchmarks{kept} (--overhead runs them)")
    else:
        print(
            f"would run {len(OVERHEAD_SCRIPTS)} overhead benchmarks ({', '.join(OVERHEAD_SCRIPTS)})"
        )
    if args.merge:
        print(f"would merge into the cases of {args.merge}")
    print(f"would write {args.out}/results.json, summary.md, report.html")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=str(HERE / "results" / "latest"), help="output folder")
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    parser.add_argument("--quick", action="store_true", help="durations / 4 (smoke run)")
    parser.add_argument(
        "--only", help="comma-separated case kinds (scenario, load-sweep, scale, ...)"
    )
    overhead = parser.add_mutually_exclusive_group()
    overhead.add_argument("--skip-overhead", action="store_true", help="simulations only")
    overhead.add_argument(
        "--overhead",
        action="store_true",
        help="run the overhead benchmarks with --cases or --only too (by default only the "
        "whole matrix runs them, about 5 minutes)",
    )
    parser.add_argument("--json", action="store_true", help="also print results.json")
    parser.add_argument("--cases", help="comma-separated substrings of case ids to run")
    parser.add_argument(
        "--merge", metavar="RESULTS_JSON", help="start from these results; re-run cases replace"
    )
    parser.add_argument(
        "--render", metavar="RESULTS_JSON", help="only re-evaluate checks and rewrite reports"
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="print what would run (cases, simulations, overheads, files read) and exit",
    )
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error("--jobs must be at least 1")
    if args.dry_run:
        return _dry_run(parser, args)
    base = _read_results(parser, "--merge", args.merge) if args.merge else None
    if args.render:
        from report import write_reports

        document = _read_results(parser, "--render", args.render)
        document["checks"] = evaluate_checks(document["cases"])
        document["published"] = evaluate_published(document["cases"])
        write_reports(document, Path(args.out))
        print(f"igw bench: re-rendered {args.out}", file=sys.stderr)
        return 0
    cases = _select(parser, args)
    started = datetime.now(UTC)
    wall = time.monotonic()
    jobs_total = sum(len(c.policies) for c in cases)
    print(
        f"igw bench: {len(cases)} cases, {jobs_total} simulations, {args.jobs} workers"
        + (" (quick)" if args.quick else ""),
        file=sys.stderr,
        flush=True,
    )
    results, cpu = run_matrix(cases, args.jobs, quick=args.quick)
    skip = _skips_overhead(args)
    if skip and not args.skip_overhead:
        print(
            "igw bench: overhead benchmarks not run with --cases/--only"
            + (" (kept from --merge)" if base else "")
            + "; --overhead runs them too",
            file=sys.stderr,
        )
    overhead = run_overhead(skip)
    if base is not None:
        for entry in base["cases"].values():  # documents from before cases said so
            entry.setdefault("quick", bool(base["run"].get("quick")))
        results = {**base["cases"], **results}
        cpu = {**base["run"].get("cpu_s_by_job", {}), **cpu}
        if skip:
            overhead = base.get("overhead", overhead)
    document = {
        "schema": SCHEMA,
        "run": {
            "started_at": started.isoformat(timespec="seconds"),
            "wall_s": round(time.monotonic() - wall, 1),
            "quick": any(c.get("quick") for c in results.values()),
            "quick_cases": sum(bool(c.get("quick")) for c in results.values()),
            "jobs": args.jobs,
            "git_commit": _git_commit(),
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "load_average": [round(x, 2) for x in os.getloadavg()],
            "cpu_s_by_job": cpu,
        },
        "cases": results,
        "checks": evaluate_checks(results),
        "published": evaluate_published(results),
        "overhead": overhead,
    }
    from report import write_reports

    out = Path(args.out)
    write_reports(document, out)
    print(f"igw bench: wrote {out}/results.json, summary.md, report.html", file=sys.stderr)
    for check in document["checks"]:
        verdict = "PASS" if check["pass"] else "FAIL"
        print(
            f"  {verdict}  {check['check']:24s} {check['scenario']:20s} "
            f"gateway {check['gateway_p99_s']:.3f} s vs {check['reference']} "
            f"{check['reference_p99_s']:.3f} s (x{check['ratio']:.3f})",
            file=sys.stderr,
        )
    for row in document["published"]:
        ours = row["gateway_vs_round_robin"][row["quantile"]]
        if ours is not None:
            print(
                f"  {row['row'][:44]:44s} published {row['claim']:42s} "
                f"ours {row['quantile']} {ours:+.1%}",
                file=sys.stderr,
            )
    if args.json:
        sys.stdout.write(json.dumps(document, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
