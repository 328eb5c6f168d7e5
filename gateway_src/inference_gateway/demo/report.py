"""The `igw demo` report: `demo-out/report.html`, one self-contained page.

What a reader needs to trust the table without the terminal: what produced the numbers
(emulated pods on loopback, the trace), what TTFT and E2E mean, the whole TTFT
distribution of each policy as a cumulative chart (a percentile table hides the shape of
a tail), and the table itself. The chart is an inline SVG drawn with matplotlib, so the
page needs no network and no JavaScript.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["LEGEND", "render_report", "ttft_cdf_svg", "write_report"]

#: the two latencies every figure of the demo is one of
LEGEND = {
    "TTFT": "time to first token: from sending the request to receiving the first "
    "streamed token. What a chat user waits before text starts to appear; queueing "
    "and prefill (reading the prompt) dominate it, so routing moves it most.",
    "E2E": "end to end: from sending the request to its last token. TTFT plus the "
    "time to generate the answer.",
    "p50 / p95 / p99": "the value that 50%, 95% and 99% of requests stay under; p99 is "
    "the slowest request in a hundred.",
    "tokens/s": "output tokens received per second of the replay, all requests together.",
}

_STYLES = ("-", "--", "-.", ":")


def ttft_cdf_svg(samples: Mapping[str, Sequence[float]]) -> str | None:
    """Cumulative share of requests against TTFT (log scale), one line per policy, each
    in its own colour and dash so coinciding stretches stay visible; None without data."""
    series = {name: sorted(values) for name, values in samples.items() if values}
    if not series:
        return None
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt
    from matplotlib.ticker import FuncFormatter

    figure, axes = plt.subplots(figsize=(7, 4))
    for i, (name, values) in enumerate(series.items()):
        shares = [(k + 1) / len(values) for k in range(len(values))]
        style = _STYLES[i % len(_STYLES)]
        label = f"{name} ({len(values)} requests)"
        axes.step(values, shares, where="post", linestyle=style, linewidth=1.8, label=label)
    for share in (0.5, 0.95, 0.99):
        axes.axhline(share, color="grey", linewidth=0.6, linestyle=":")
        axes.annotate(
            f"p{share * 100:g}",
            (1.0, share),
            xycoords=("axes fraction", "data"),
            xytext=(3, -3),
            textcoords="offset points",
            fontsize=7,
            color="grey",
        )
    axes.set_xscale("log")
    axes.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))  # 0.1, not 10⁻¹
    axes.set_xlabel("time to first token, seconds (log scale)")
    axes.set_ylabel("share of requests with TTFT ≤ x")
    axes.set_ylim(0, 1.02)
    axes.grid(True, which="both", alpha=0.25)
    axes.legend(loc="lower right", fontsize=8)
    buffer = io.StringIO()
    with plt.rc_context({"svg.fonttype": "none"}):  # text stays text: searchable, smaller
        figure.savefig(buffer, format="svg", bbox_inches="tight")
    plt.close(figure)
    svg = buffer.getvalue()
    return svg[svg.find("<svg") :]


def render_report(
    results: Mapping[str, Mapping[str, float]],
    ttft_samples: Mapping[str, Sequence[float]],
    *,
    requests: int,
    fleet: Sequence[str],
    args: Any,
    trace: str = "",
    policies: Mapping[str, str] | None = None,
    provenance: Sequence[str] = (),
    ratios: Mapping[str, str] | None = None,
    machine: str = "",
) -> str:
    """The page: `trace` describes the requests, `policies` what each row is,
    `provenance` how each policy's run started (fleet, processes), `ratios` the P99
    ratio lines with their spread over runs (demo/history.py), `machine` its load."""
    from jinja2 import Environment, select_autoescape

    env = Environment(autoescape=select_autoescape(default=True, default_for_string=True))
    return env.from_string(REPORT).render(
        results=results,
        requests=requests,
        fleet=fleet,
        args=args,
        trace=trace,
        policies=policies or {},
        provenance=provenance,
        ratios=ratios or {},
        machine=machine,
        legend=LEGEND,
        chart=ttft_cdf_svg(ttft_samples),
    )


def write_report(out: Path, html: str) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    path = out / "report.html"
    path.write_text(html)
    return path


REPORT = """<!doctype html><html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1"><title>igw demo</title>
<style>body{font-family:system-ui,sans-serif;margin:1.5rem auto;padding:0 1rem;
max-width:60rem;color:#222;line-height:1.4}
.wide{max-width:100%;overflow-x:auto}table{border-collapse:collapse;margin:1rem 0}
td,th{padding:4px 10px;text-align:right;border-bottom:1px solid #ddd}
th:first-child,td:first-child{text-align:left}
.source{background:#eef4ff;border-left:4px solid #4a7bd0;padding:.5rem .8rem}
dl{display:grid;grid-template-columns:max-content 1fr;gap:.2rem 1rem}dt{font-weight:600}
dd{margin:0}svg{max-width:100%;height:auto}</style></head><body>
<h1>Inference gateway demo</h1>
<p class="source"><strong>What produced these numbers.</strong>
{% if trace %}{{ trace }}{% else %}{{ requests }} streamed chat requests over
{{ args.duration }} s{% endif %}, replayed with the official <code>openai</code> client
against <strong>emulated</strong> vLLM pods on loopback ({{ fleet | join("; ") }}; the
emulator's model of each GPU, not real hardware), once per policy. Every policy started
from the same state: a fleet started for it alone, whose pods' own metrics showed no
prefix-cache lookup, no KV block in use and no request before its replay; its data plane
ran in processes of its own, apart from the pods and from the client, as in a cluster.</p>
{% if policies %}<dl>{% for name, text in policies.items() %}<dt>{{ name }}</dt>
<dd>{{ text }}</dd>{% endfor %}</dl>{% endif %}
<h2>Time to first token, every request</h2>
<p>Further left is faster; a line that rises late has a slow tail. Each policy saw the
same requests at the same times.</p>
{% if chart %}{{ chart | safe }}{% else %}<p>No request completed.</p>{% endif %}
<h2>Summary</h2>
<div class="wide"><table><tr><th>policy</th><th>TTFT p50 s</th><th>TTFT p95 s</th>
<th>TTFT p99 s</th><th>E2E p99 s</th><th>tokens/s</th><th>completed</th><th>errors</th></tr>
{% for name, r in results.items() %}<tr><td>{{ name }}</td>
<td>{{ '%.3f' % r.ttft_p50_s }}</td><td>{{ '%.3f' % r.ttft_p95_s }}</td>
<td>{{ '%.3f' % r.ttft_p99_s }}</td><td>{{ '%.3f' % r.e2e_p99_s }}</td>
<td>{{ '%.1f' % r.tokens_per_s }}</td><td>{{ r.completed }}</td><td>{{ r.errors }}</td></tr>
{% endfor %}</table></div>
{% if ratios %}<h2>Ratios, and their spread over runs</h2>
<p>One run's P99 rests on its slowest few requests, on a machine that may be shared: each
run is kept in <code>runs.jsonl</code> beside this page, and each ratio is shown with the
range it took over the recent runs with the same settings.</p>
<ul>{% for line in ratios.values() %}<li>{{ line }}</li>{% endfor %}</ul>{% endif %}
{% if machine %}<p>{{ machine }}.</p>{% endif %}
{% if provenance %}<h2>How each run started</h2>
<ul>{% for line in provenance %}<li>{{ line }}</li>{% endfor %}</ul>{% endif %}
<h2>What the figures mean</h2>
<dl>{% for term, text in legend.items() %}<dt>{{ term }}</dt><dd>{{ text }}</dd>{% endfor %}
<dt>completed / errors</dt><dd>requests answered in full / failed (any error counts)</dd>
</dl></body></html>
"""
