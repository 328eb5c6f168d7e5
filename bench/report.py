"""Render a bench results document as results.json, summary.md and report.html.

Every table is built once (`sections`: a heading, paragraphs, a table, notes) and
written twice: as Markdown (summary.md, what docs/benchmarks.md carries) and as HTML
tables (report.html), which adds charts (matplotlib, drawn headless, embedded as PNG
data URIs so the report is one file a CI job can archive).
"""

from __future__ import annotations

import base64
import html
import io
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2
import markupsafe

__all__ = [
    "Section",
    "cdf_figure",
    "markdown",
    "published_sections",
    "sections",
    "summary_markdown",
    "write_reports",
]

BANDS = ("critical", "standard", "sheddable")
COLUMNS = [
    ("ttft_p50_s", "TTFT p50 s"),
    ("ttft_p95_s", "TTFT p95 s"),
    ("ttft_p99_s", "TTFT p99 s"),
    ("tpot_p50_s", "TPOT p50 s"),
    ("tpot_p99_s", "TPOT p99 s"),
    ("e2e_p99_s", "E2E p99 s"),
    ("output_tokens_per_s", "out tok/s"),
    ("completed", "done"),
    ("rejected", "rej"),
    ("cost_per_million_tokens", "$/Mtok"),
]


def _fmt(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if value >= 100:
            return f"{value:,.0f}"
        if value >= 10:
            return f"{value:.1f}"
        return f"{value:.3f}"
    return str(value)


@dataclass
class Section:
    """One part of the report: a heading, paragraphs, a table and notes under it. Text
    may use Markdown's `code` and **bold**, the only inline marks the HTML writer knows."""

    heading: str = ""
    paragraphs: list[str] = field(default_factory=list)
    header: list[str] = field(default_factory=list)
    rows: list[list[str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _cells(row: list[Any]) -> list[str]:
    return [v if isinstance(v, str) else _fmt(v) for v in row]


def _of_kind(doc: dict[str, Any], kind: str) -> dict[str, Any]:
    return {k: v for k, v in doc["cases"].items() if v["kind"] == kind}


def _run_line(doc: dict[str, Any]) -> str:
    run = doc["run"]
    total = len(doc["cases"])
    quick = run.get("quick_cases", total if run.get("quick") else 0)
    label = ""
    if quick and quick == total:
        label = "quick run (durations / 4), "
    elif quick:
        label = f"partly a quick run ({quick} of {total} cases at durations / 4), "
    day = str(run.get("started_at", ""))[:10]
    return (
        f"Measured on {day} at commit `{run.get('git_commit')}`: schema `{doc['schema']}`, "
        f"{label}{run['wall_s']:.0f} s wall on {run['cpus']} CPUs with {run['jobs']} workers "
        f"(load average at the end {run['load_average'][0]})."
    )


FIGURE_NAMES = {"ttft_p99_s": "P99 TTFT", "tpot_p99_s": "P99 TPOT"}


def sections(doc: dict[str, Any]) -> list[Section]:
    """Every table of the report, in order."""
    out = [Section(paragraphs=[_run_line(doc)])]
    out.append(
        Section(
            "Must-hold checks",
            ["Each row compares one figure (its column says which) of the gateway with "
             "the reference's; the ratio is reference over gateway for P/D, else gateway "
             "over reference."],
            ["check", "scenario", "figure", "gateway s", "gateway rejected", "reference",
             "reference s", "reference rejected", "ratio", "result"],
            [
                _cells([
                    c["check"], c["scenario"],
                    FIGURE_NAMES[c.get("figure", "ttft_p99_s")],
                    c["gateway_p99_s"], c.get("gateway_rejected"), c["reference"],
                    c["reference_p99_s"], c.get("reference_rejected"),
                    f"{c['ratio']:.3f}", "**pass**" if c["pass"] else "**FAIL**",
                ])
                for c in doc["checks"]
            ],
        )
    )  # fmt: skip
    out += published_sections(doc)
    for case in _of_kind(doc, "scenario").values():
        out.append(
            Section(
                f"{case['scenario']} ({case['pods']} pods, {case['duration_s']:.0f} s, "
                f"capacity {case['capacity_rps']:.1f} req/s, seed {case['seed']})",
                header=["policy", *[label for _, label in COLUMNS]],
                rows=[
                    _cells([p, *[r[k] for k, _ in COLUMNS]]) for p, r in case["policies"].items()
                ],
            )
        )
        out += _bands(case)
    for name, curve in _sweeps(doc).items():
        loads = sorted({load for points in curve.values() for load, _ in points})
        out.append(
            Section(
                f"P99 TTFT (s) versus load: {name} ({_sweep_seconds(doc, name):.0f} s per point)",
                header=["policy", *[f"{int(load * 100)}%" for load in loads]],
                rows=[_cells([p, *[v for _, v in sorted(points)]]) for p, points in curve.items()],
            )
        )
    scrape = _of_kind(doc, "scrape-interval")
    if scrape:
        policies = list(next(iter(scrape.values()))["policies"])
        out.append(
            Section(
                "P99 TTFT (s) versus scrape interval: mixed-fleet-bursty (300 s)",
                header=[
                    "policy",
                    *[f"{c['params']['scrape_interval_ms']} ms" for c in scrape.values()],
                ],
                rows=[
                    _cells([p, *[c["policies"][p]["ttft_p99_s"] for c in scrape.values()]])
                    for p in policies
                ],
            )
        )
    for kind, title in (("replicas", "Gateway replicas"), ("scale", "Scale")):
        for case in _of_kind(doc, kind).values():
            out.append(
                Section(
                    f"{title}: {case['scenario']} ({case['pods']} pods, "
                    f"{case['duration_s']:.0f} s)",
                    header=["policy", *[label for _, label in COLUMNS]],
                    rows=[
                        _cells([p, *[r[k] for k, _ in COLUMNS]])
                        for p, r in case["policies"].items()
                    ],
                )
            )
    out.append(Section("Overhead benchmarks"))
    for name, entry in doc["overhead"].items():
        if entry.get("status") == "ok":
            flat = _flatten(entry["figures"])
            out.append(Section(paragraphs=[f"**{name}**"], header=["figure", "value"],
                               rows=[_cells([k, v]) for k, v in flat]))  # fmt: skip
        else:
            out.append(Section(paragraphs=[f"**{name}**: {entry.get('status')}"]))
    return out


def summary_markdown(doc: dict[str, Any]) -> str:
    """Every table of the report, in Markdown."""
    return markdown(sections(doc))


def markdown(chosen: list[Section]) -> str:
    """SECTIONS in Markdown: headings, paragraphs, tables, notes."""
    parts: list[str] = []
    for section in chosen:
        if section.heading:
            parts += ["", f"### {section.heading}"]
        for paragraph in section.paragraphs:
            parts += ["", paragraph]
        if section.header:
            parts += ["", "| " + " | ".join(section.header) + " |"]
            parts.append("|" + "|".join("---" for _ in section.header) + "|")
            parts += ["| " + " | ".join(row) + " |" for row in section.rows]
        if section.notes:
            parts.append("")
            parts += [f"* {note}" for note in section.notes]
    return "\n".join(parts).strip() + "\n"


def _inline_html(text: str) -> str:
    """Markdown's `code` and **bold**, escaped otherwise."""
    out = html.escape(text)
    out = re.sub(r"`([^`]+)`", r"<code>\1</code>", out)
    return re.sub(r"\*\*([^*]+)\*\*", r"<strong>\1</strong>", out)


def _pct(value: float | None) -> str:
    if value is None:
        return "–"
    percent = round(value * 100)
    return f"{percent:+d} %" if percent else "0 %"


def _triple(changes: dict[str, Any] | None, first: str = "p95") -> str:
    """'P95 / P99 / throughput' changes in one cell (P50 first for the chat row)."""
    if not changes:
        return "–"
    keys = ["p50", "p95", "p99"] if first == "p50" else ["p95", "p99"]
    return " / ".join(_pct(changes[k]) for k in [*keys, "throughput"])


def published_sections(doc: dict[str, Any]) -> list[Section]:
    """The published benchmark beside ours, row by row, and where and why we differ.

    Every figure but the published column comes from this run's `cases`."""
    rows = doc.get("published") or []
    if not rows:
        return []
    table = []
    for r in rows:
        q = r["quantile"]
        table.append(
            [
                r["row"],
                f"`{r['scenario']}` ({r['pods']} pods, {r['duration_s']:.0f} s)",
                r["claim"],
                _triple(r["gateway_vs_round_robin"], q),
                _triple(r["gateway_vs_upstream_default"], q),
                _triple(r["oracle_vs_round_robin"], q),
                {True: "yes", False: "**no**", None: "–"}[r["meets"]],
            ]
        )
    notes = []
    for r in rows:
        if r["meets"] is not False and not (r["meets"] is None and r["why"]):
            continue
        q = r["quantile"]
        ours = r["gateway_vs_round_robin"][q]
        oracle = (r["oracle_vs_round_robin"] or {}).get(q)
        done = r["completed"]
        notes.append(
            f"**{r['row']}**: ours {q.upper()} {_pct(ours)} against round-robin "
            f"(oracle {_pct(oracle)}; completed: gateway {done['gateway']:,}, round-robin "
            f"{done['round-robin']:,}); published {r['claim']}. Why: {r['why']}."
        )
    throughput = [r for r in rows if r["published"]["throughput"] is not None]
    if throughput:
        notes.append(
            "**Throughput** (rows "
            + ", ".join(r["row"] for r in throughput)
            + f"): {throughput[0]['why']}."
        )
    intro = (
        "Changes against round-robin (a Kubernetes Service) unless the column says "
        "otherwise; cells are P95 / P99 TTFT / output throughput (P50 / P95 / P99 / "
        "throughput for the chat example, whose published figure is one user's first "
        "token, compared as the median). The published column is the vendor's table; every "
        "other figure is from this run. New rows run 600 s (the 8B headline 1,800 s)."
    )
    header = [
        "published row",
        "our scenario",
        "published vs round-robin",
        "gateway vs round-robin",
        "gateway vs upstream defaults",
        "oracle vs round-robin",
        "at least the published P99 (P50 chat)",
    ]
    return [
        Section("The published benchmark, row by row", [intro], header, table),
        Section(paragraphs=["Where we differ, and why:"], notes=notes),
    ]


def _bands(case: dict[str, Any]) -> list[Section]:
    """P99 TTFT and rejections per priority band, where the scenario has bands."""
    rows = []
    for policy, r in case["policies"].items():
        p99 = r.get("ttft_p99_s_by_band") or {}
        rejected = r.get("rejected_by_band") or {}
        if p99 or rejected:
            rows.append(
                _cells([policy] + [p99.get(b) for b in BANDS] + [rejected.get(b, 0) for b in BANDS])
            )
    if not rows:
        return []
    header = ["policy"] + [f"P99 s {b}" for b in BANDS] + [f"rejected {b}" for b in BANDS]
    return [Section(header=header, rows=rows)]


def _flatten(figures: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for key, value in figures.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out += _flatten(value, f"{name}.")
        elif isinstance(value, int | float | str | bool) or value is None:
            out.append((name, value))
    return out


def _sweep_seconds(doc: dict[str, Any], name: str) -> float:
    for case in _of_kind(doc, "load-sweep").values():
        if case["scenario"].split("@")[0] == name:
            return float(case["duration_s"])
    return 0.0


def _sweeps(doc: dict[str, Any]) -> dict[str, dict[str, list[tuple[float, float]]]]:
    """scenario → policy → [(load, P99 TTFT)]."""
    out: dict[str, dict[str, list[tuple[float, float]]]] = {}
    for case in _of_kind(doc, "load-sweep").values():
        name = case["scenario"].split("@")[0]
        for policy, r in case["policies"].items():
            out.setdefault(name, {}).setdefault(policy, []).append(
                (case["params"]["load"], r["ttft_p99_s"])
            )
    return out


# ---------------------------------------------------------------------------- charts


PALETTE = {
    "gateway": "tab:blue",
    "round-robin": "tab:orange",
    "least-outstanding": "tab:green",
    "upstream-default": "tab:red",
    "production-stack-prefixaware": "tab:purple",
    "sglang-cache-aware": "tab:brown",
    "dynamo-kv": "tab:pink",
    "oracle": "tab:gray",
}


def _color(policy: str) -> str | None:
    """One colour per policy in every chart (replicas share their base's)."""
    return PALETTE.get(policy.split("@")[0])


def _png(fig: Any) -> str:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def cdf_figure(case: dict[str, Any]) -> Any:
    """The TTFT CDF of one scenario: a line per policy from its `ttft_quantiles_s`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    from matrix import QUANTILES

    fig, ax = plt.subplots(figsize=(7, 4))
    for policy, r in case["policies"].items():
        q = r.get("ttft_quantiles_s")
        if q and len(q) == len(QUANTILES):
            ax.plot(
                np.maximum(q, 1e-3),
                np.asarray(QUANTILES) / 100,
                label=policy,
                color=_color(policy),
                linestyle="--" if policy == "oracle" else "-",
            )
    ax.set_xscale("log")
    ax.set_xlabel("TTFT (s, log)")
    ax.set_ylabel("fraction of requests")
    ax.set_title(f"TTFT CDF — {case['scenario']}")
    ax.grid(True, alpha=0.3)
    if ax.lines:
        ax.legend(fontsize=7)
    return fig


def _charts(doc: dict[str, Any]) -> list[dict[str, str]]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    charts = []
    for case in _of_kind(doc, "scenario").values():
        fig = cdf_figure(case)
        charts.append({"title": f"TTFT CDF: {case['scenario']}", "src": _png(fig)})
    for name, curve in _sweeps(doc).items():
        fig, ax = plt.subplots(figsize=(7, 4))
        for policy, points in curve.items():
            points = sorted(points)
            ax.plot(
                [x * 100 for x, _ in points],
                [max(y, 1e-3) for _, y in points],
                "o--" if policy == "oracle" else "o-",
                label=policy,
                color=_color(policy),
            )
        ax.set_yscale("log")
        ax.set_xlabel("offered load (% of capacity)")
        ax.set_ylabel("P99 TTFT (s, log)")
        ax.set_title(f"P99 TTFT versus load — {name}")
        ax.grid(True, alpha=0.3)
        if ax.lines:
            ax.legend(fontsize=7)
        charts.append({"title": f"P99 TTFT versus load: {name}", "src": _png(fig)})
    scrape = list(_of_kind(doc, "scrape-interval").values())
    if scrape:
        fig, ax = plt.subplots(figsize=(7, 4))
        xs = [c["params"]["scrape_interval_ms"] for c in scrape]
        for policy in scrape[0]["policies"]:
            ys = [c["policies"][policy]["ttft_p99_s"] for c in scrape]
            ax.plot(xs, ys, "o-", label=policy, color=_color(policy))
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("scrape interval (ms, log)")
        ax.set_ylabel("P99 TTFT (s, log)")
        ax.set_title("Scrape-interval sensitivity — mixed-fleet-bursty")
        ax.grid(True, alpha=0.3)
        if ax.lines:
            ax.legend(fontsize=7)
        charts.append({"title": "P99 TTFT versus scrape interval", "src": _png(fig)})
    replicas = _of_kind(doc, "replicas")
    single = doc["cases"].get("scenario/mixed-fleet-bursty")
    if replicas and single:
        fig, ax = plt.subplots(figsize=(7, 3.5))
        bars = {"gateway": single["policies"]["gateway"]["ttft_p99_s"]}
        if "upstream-default" in single["policies"]:
            bars["upstream-default"] = single["policies"]["upstream-default"]["ttft_p99_s"]
        for case in replicas.values():
            bars.update({p: r["ttft_p99_s"] for p, r in case["policies"].items()})
        ax.bar(list(bars), list(bars.values()), color=[_color(p) for p in bars])
        ax.set_yscale("log")
        ax.set_ylabel("P99 TTFT (s, log)")
        ax.set_title(
            "Router replicas sharing their dispatch view (-unshared: not) — mixed-fleet-bursty"
        )
        ax.tick_params(axis="x", labelrotation=20)
        charts.append({"title": "Gateway replicas (shared view and herding)", "src": _png(fig)})
    cpu = doc["run"].get("cpu_s_by_job", {})
    speed: dict[str, list[float]] = {}
    for key, seconds in cpu.items():
        case_id, policy = key.split("|")
        case = doc["cases"][case_id]
        if case["kind"] != "scenario" or seconds <= 0:
            continue
        done = case["policies"][policy]["completed"]
        speed.setdefault(policy, []).append(done / seconds)
    if speed:
        fig, ax = plt.subplots(figsize=(7, 3.5))
        names = list(speed)
        ax.bar(names, [sum(v) / len(v) for v in speed.values()])
        ax.set_ylabel("simulated requests per CPU-second")
        ax.set_title("Simulator cost per policy (routing + engine model), shipped scenarios")
        ax.tick_params(axis="x", labelrotation=25)
        charts.append({"title": "Simulation overhead per policy", "src": _png(fig)})
    return charts


TEMPLATE = jinja2.Template(
    """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>igw bench — {{ run.git_commit or "working tree" }}</title>
<style>
 body { font-family: system-ui, sans-serif; margin: 2rem auto; max-width: 70rem; color: #222; }
 table { border-collapse: collapse; margin: 0.5rem 0 1.5rem; font-size: 0.85rem; }
 th, td { border: 1px solid #ccc; padding: 0.2rem 0.5rem; text-align: right; }
 th:first-child, td:first-child { text-align: left; }
 figure { margin: 1rem 0; } img { max-width: 100%; }
 code { background: #f3f3f3; padding: 0 0.2rem; }
</style></head><body>
<h1>Inference gateway routing benchmark</h1>
<p>Figures are from the discrete-event simulator over the vLLM-faithful engine model
(see docs/benchmarks.md for the method and assumptions); started {{ run.started_at }}.</p>
{% for s in sections %}{% if s.heading %}<h2>{{ s.heading }}</h2>{% endif %}
{% for p in s.paragraphs %}<p>{{ inline(p) }}</p>{% endfor %}
{% if s.header %}<table><tr>{% for h in s.header %}<th>{{ h }}</th>{% endfor %}</tr>
{% for row in s.rows %}<tr>{% for cell in row %}<td>{{ inline(cell) }}</td>{% endfor %}</tr>
{% endfor %}</table>{% endif %}
{% if s.notes %}<ul>{% for n in s.notes %}<li>{{ inline(n) }}</li>{% endfor %}</ul>{% endif %}
{% endfor %}
<h2>Charts</h2>
{% for chart in charts %}<figure><img alt="{{ chart.title }}" src="{{ chart.src }}">
<figcaption>{{ chart.title }}</figcaption></figure>{% endfor %}
</body></html>
""",
    autoescape=True,
)


def write_reports(doc: dict[str, Any], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(doc, indent=2) + "\n")
    (out / "summary.md").write_text(summary_markdown(doc))
    page = TEMPLATE.render(
        run=doc["run"],
        sections=sections(doc),
        charts=_charts(doc),
        inline=lambda text: markupsafe.Markup(_inline_html(text)),
    )
    (out / "report.html").write_text(page)
