"""`igw explain REQUEST_ID [--url URL] [--json]`: why a request went where it went.

Reads a replica's recent decisions (`GET /debug/decisions/<id>`, frontends/
explain_http.py): the picker's metrics port by default (`kubectl port-forward
deploy/igw-picker 9005` first in a cluster), or `igw serve` / `igw global` by `--url`.
`REQUEST_ID` is the request's `x-request-id`, its trace id or the gateway's internal id.
Each replica keeps its own last `tracing.explain.recent` decisions, so ask the replica
that served the request (the trace's `service.instance.id`, or each in turn).

Prints the request's route (model, pool, band, profile, pods tried, outcome, timings,
tokens) and the scheduling cycle: the best candidates with each scorer's score and
weight and the predicted TTFT, the pods left out and why, the P/D prefill cycle; for
tier 2, the clusters with the signal behind each weight. Exit status 1 when the
replica keeps no such decision, 2 when it cannot be reached.
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from inference_gateway.transport.ports import DEFAULTS

__all__ = ["describe", "register", "run"]

DEFAULT_URL = f"http://127.0.0.1:{DEFAULTS['igw picker', '--metrics-port']}"


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "explain",
        help="explain a recent routing decision (candidates, scores, weights, exclusions)",
        description=__doc__.split("\n\n")[1],
    )
    parser.add_argument("request_id", metavar="REQUEST_ID", help="x-request-id, trace id or id")
    parser.add_argument(
        "--url",
        default=DEFAULT_URL,
        help="the replica: picker metrics port, igw serve or igw global (default %(default)s)",
    )
    parser.add_argument("--json", action="store_true", help="the records as JSON")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    quoted = urllib.parse.quote(args.request_id, safe="")
    url = f"{args.url.rstrip('/')}/debug/decisions/{quoted}"
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            records = json.loads(answer.read())["decisions"]
    except urllib.error.HTTPError as error:
        if error.code == 404:
            print(
                f"igw explain: {args.url} keeps no decision for {args.request_id!r} (only its "
                "own last `tracing.explain.recent`; from loopback, or a listed client)",
                file=sys.stderr,
            )
            return 1
        print(f"igw explain: {url}: HTTP {error.code}", file=sys.stderr)
        return 2
    except (urllib.error.URLError, OSError, ValueError) as error:
        print(f"igw explain: cannot read {url}: {error}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(records, indent=2))
        return 0
    print("\n\n".join(describe(record) for record in records))
    return 0


def describe(record: dict[str, Any]) -> str:
    """One decision record as text (the tier-1 or the tier-2 shape)."""
    lines = [
        f"request {record.get('requestId') or '-'}  id {record.get('id')}  "
        f"trace {record.get('traceId') or '-'}"
    ]
    route = [
        f"model {record.get('model')}",
        *(
            [f"-> {record['targetModel']}"]
            if record.get("targetModel") != record.get("model") and record.get("targetModel")
            else []
        ),
        *(f"{k} {record[k]}" for k in ("pool", "band", "profile") if record.get(k)),
    ]
    lines.append("  " + ", ".join(route))
    outcome = [f"tried {', '.join(record.get('tried') or []) or '-'}"]
    if record.get("prefillPod"):
        outcome.append(f"prefill on {record['prefillPod']}")
    for key, label in (("outcome", "outcome"), ("status", "status")):
        if record.get(key) is not None:
            outcome.append(f"{label} {record[key]}")
    lines.append("  " + ", ".join(outcome))
    timing = [
        f"{label} {record[key] * 1000:.2f} ms"
        for key, label in (("queuedS", "queued"), ("scheduleS", "scheduling"), ("ttftS", "TTFT"))
        if isinstance(record.get(key), (int, float))
    ]
    tokens = [
        f"{label} {record[key]}"
        for key, label in (
            ("inputTokens", "input"),
            ("outputTokens", "output"),
            ("cachedTokens", "cached"),
        )
        if record.get(key) is not None
    ]
    if timing or tokens:
        lines.append("  " + ", ".join(timing + [f"tokens {' / '.join(tokens)}"] * bool(tokens)))
    explanation = record.get("explanation") or {}
    if "signals" in str(explanation.get("top", "")):
        lines += _clusters(explanation)
    elif explanation:
        lines += _cycle(explanation, "scheduling")
        if explanation.get("prefill"):
            lines += _cycle(explanation["prefill"], "prefill")
    return "\n".join(lines)


def _cycle(explanation: dict[str, Any], what: str) -> list[str]:
    weights: dict[str, float] = explanation.get("weights", {})
    lines = [
        f"  {what}: profile {explanation.get('profile')}, {explanation.get('candidates')} "
        f"candidates of {explanation.get('considered')}, picked {explanation.get('picked')}"
    ]
    if weights:
        lines.append("    weights: " + ", ".join(f"{name} {w:g}" for name, w in weights.items()))
    for rank, row in enumerate(explanation.get("top", []), 1):
        scores = ", ".join(f"{name} {score:.3f}" for name, score in row["scores"].items())
        total = "-" if row.get("total") is None else f"{row['total']:.3f}"
        ttft = row.get("predictedTtftS") or {}
        predicted = "".join(f", predicted TTFT {v * 1000:.1f} ms" for v in ttft.values())
        lines.append(f"    {rank}. {row['pod']}  total {total}  ({scores}){predicted}")
    for reason, entry in (explanation.get("excluded") or {}).items():
        names = ", ".join(entry["pods"]) + (" ..." if entry["count"] > len(entry["pods"]) else "")
        lines.append(f"    left out ({reason}): {entry['count']}: {names}")
    return lines


def _clusters(explanation: dict[str, Any]) -> list[str]:
    weights = explanation.get("weights", {})
    lines = [
        f"  clusters: profile {explanation.get('profile')}, home region "
        f"{explanation.get('homeRegion') or '-'}, {explanation.get('routable')} routable, "
        f"picked {explanation.get('picked')}",
        "    weights: " + ", ".join(f"{name} {w:g}" for name, w in weights.items()),
    ]
    for rank, row in enumerate(explanation.get("top", []), 1):
        signals = ", ".join(f"{name} {v:.3f}" for name, v in row["signals"].items())
        lines.append(
            f"    {rank}. {row['cluster']} ({row['region']})  total {row['total']:.3f}  "
            f"({signals})  {row['placed']}"
        )
    return lines
