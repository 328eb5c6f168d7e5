"""Engine adapters: Prometheus text of vLLM, SGLang, TRT-LLM or TGI → `PodMetrics`.

Metric names (DESIGN §3):

  vLLM     queue vllm:num_requests_waiting, running vllm:num_requests_running,
           KV vllm:kv_cache_usage_perc (older: vllm:gpu_cache_usage_perc)
  SGLang   sglang:num_queue_reqs, sglang:num_running_reqs, sglang:token_usage
  TRT-LLM  trtllm_num_requests_waiting, trtllm_num_requests_running,
           trtllm_kv_cache_utilization
  TGI      tgi_queue_size, tgi_batch_current_size (no KV gauge)

vLLM also gives LoRA residency (`vllm:lora_requests_info` labels) and cache geometry
(`vllm:cache_config_info`), SGLang its cache geometry (`sglang:cache_config_info`).

Why not a general Prometheus parser: a real vLLM page is ~48 KB, mostly histograms
(TTFT, latencies, token counts, HTTP timings) the picker never reads, and the general
parser builds an object for each of its ~500 samples: ~8 ms of CPU per scrape, so one
core watched four pods at 50 ms and no more (bench/scrape_cost.py). This module finds
only the sample lines it needs with `str.find` (a C scan of the page) and parses those
few lines, in microseconds. Lines it does not need are not validated; a needed line
that does not parse is a `ValueError`, so the scrape fails and the pod goes stale
rather than routing on a guess.

vLLM can send only those families: its `/metrics/` (trailing slash) is prometheus_client's
ASGI app (vllm/entrypoints/serve/instrumentator/metrics.py mounts `make_asgi_app` under
`^/metrics(?P<path>.*)$`, after the instrumentator's own exact `/metrics` route), which
honours `name[]` query parameters by serving `registry.restricted_registry(names)`
(prometheus_client `exposition._bake_output`). `FILTERED_PATHS` asks for exactly the
sample names this module reads: ~1 KB instead of ~48 KB, rendered by the pod for a
fraction of the whole page's cost. In multiprocess mode (vLLM with several API servers,
SGLang always) the restricted registry knows no names and the answer is empty; such a
pod is read whole (`routing_families_present`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from urllib.parse import quote

from inference_gateway.core.scheduling.types import PodMetrics

__all__ = [
    "ENGINES",
    "FILTERED_NAMES",
    "FILTERED_PATHS",
    "PageLayout",
    "parse_metrics",
    "routing_families_present",
]

ENGINES = {
    "vllm": {
        "waiting": ["vllm:num_requests_waiting"],
        "running": ["vllm:num_requests_running"],
        "kv": ["vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"],
    },
    "sglang": {
        "waiting": ["sglang:num_queue_reqs"],
        "running": ["sglang:num_running_reqs"],
        "kv": ["sglang:token_usage"],
    },
    "trtllm": {
        "waiting": ["trtllm_num_requests_waiting"],
        "running": ["trtllm_num_requests_running"],
        "kv": ["trtllm_kv_cache_utilization"],
    },
    "tgi": {
        "waiting": ["tgi_queue_size"],
        "running": ["tgi_batch_current_size"],
        "kv": [],
    },
}
LORA_INFO = "vllm:lora_requests_info"
CACHE_INFO = {"vllm": "vllm:cache_config_info", "sglang": "sglang:cache_config_info"}


def _routing_names(engine: str) -> list[str]:
    """Every sample name `parse_metrics` reads (all of them gauges: a gauge's one sample
    name is its family's)."""
    names = ENGINES[engine]
    return [*names["waiting"], *names["running"], *names["kv"], LORA_INFO, CACHE_INFO[engine]]


#: The sample names a filtered scrape asks for, by engine that can filter.
FILTERED_NAMES = {"vllm": _routing_names("vllm")}
#: Where such an engine serves only those (`/metrics/?name[]=…`); an engine not named
#: here is read whole from `/metrics`.
FILTERED_PATHS = {
    engine: "/metrics/?" + "&".join("name%5B%5D=" + quote(name, safe="") for name in names)
    for engine, names in FILTERED_NAMES.items()
}

# one `name="value"` pair of a label block; values may hold escaped quotes (text format 0.0.4)
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')
_UNESCAPE = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}


class PageLayout:
    """Where one pod's page had each family's `# TYPE` line (-1: none), last time, and
    the families it did not have at all.

    A pod's page keeps its layout from scrape to scrape (only numbers move, and their
    lengths a little), so a family is looked for first within `WINDOW` characters of
    where it was: a few KB scanned instead of the page up to it. A family the page did
    not have is not looked for again until `RECHECK` scrapes later (which families a
    server exports is fixed at its start: LoRA info with `--enable-lora`, and so on)."""

    WINDOW = 2048
    RECHECK = 20

    __slots__ = ("absent", "at", "scrapes")

    def __init__(self) -> None:
        self.at: dict[str, int] = {}
        self.absent: set[str] = set()
        self.scrapes = 0

    def due(self) -> bool:
        """Whether this scrape looks again for what was not there."""
        return self.scrapes % self.RECHECK == 0

    def find(self, text: str, needle: str) -> int:
        """`text.find(needle)` at a line start, near where it was last time."""
        last = self.at.get(needle)
        if last == -1 and not self.due():
            return -1
        at = -1
        if last is not None and last >= 0:
            window = self.WINDOW
            at = text.find(needle, max(0, last - window), last + window + len(needle))
            if at > 0 and text[at - 1] != "\n":
                at = -1
        if at < 0:
            at = _type_line(text, needle)
        self.at[needle] = at
        return at


def _type_line(text: str, needle: str) -> int:
    at = text.find(needle)
    while at > 0 and text[at - 1] != "\n":  # inside another line (a HELP text)
        at = text.find(needle, at + 1)
    return at


def _lines(text: str, name: str, layout: PageLayout | None = None) -> Iterator[str]:
    """Every sample line of metric `name` (not of a longer name it is a prefix of, such
    as vLLM's `…_waiting_by_reason`), in page order.

    A family's samples follow its `# TYPE` line as one group (the text format requires
    it): when the page has that line, only the group is read, found with one `str.find`
    of a needle that starts with `#` (rare in a page), near where it was last time with
    the pod's `layout`. Without it (an untyped sample is legal) the page is scanned for
    line starts followed by the name (comment lines start with `#`, so such a line is
    always a sample), and a family found neither way is remembered as absent. Every
    family used to scan a whole real-size vLLM page for `\n<name>`, ~500 line starts,
    to its end (`bench/scrape_cost.py` has the parse's cost)."""
    size = len(name)
    needle = "# TYPE " + name + " "
    at = layout.find(text, needle) if layout is not None else _type_line(text, needle)
    if at >= 0:
        start = text.find("\n", at) + 1
        if start == 0:  # the TYPE line ends the page: no samples
            return
        end = text.find("\n#", start - 1)
        for line in text[start : end if end >= 0 else len(text)].split("\n"):
            if line.startswith(name) and line[size : size + 1] in ("{", " ", "\t"):
                yield line
        return
    if layout is not None and name in layout.absent and not layout.due():
        return
    found = False
    for line in _scanned_lines(text, name):
        found = True
        yield line
    if layout is not None:  # (reached only when the caller read every line)
        if found:
            layout.absent.discard(name)
        else:
            layout.absent.add(name)


def _scanned_lines(text: str, name: str) -> Iterator[str]:
    """`_lines` on a page without the family's `# TYPE` line."""
    needle = "\n" + name
    size = len(name)
    pos = 0 if text.startswith(name) else text.find(needle) + 1
    while pos > 0 or (pos == 0 and text.startswith(name)):
        end = text.find("\n", pos)
        line = text[pos:end] if end >= 0 else text[pos:]
        if line[size : size + 1] in ("{", " ", "\t", ""):
            yield line
        if end < 0:
            return
        pos = text.find(needle, end) + 1
        if pos == 0:
            return


def _value(line: str) -> float:
    """The sample value: after the label block (its last `}`: values and timestamps hold
    none) or after the name, before an optional timestamp."""
    close = line.rfind("}")
    fields = line[close + 1 :].split() if close >= 0 else line.split()[1:]
    if not fields:
        raise ValueError(f"no value in metric line {line[:120]!r}")
    return float(fields[0])  # accepts NaN and +Inf, as the text format does


_LABEL_CACHE: dict[str, dict[str, str]] = {}  # label blocks repeat verbatim scrape after scrape
_LABEL_CACHE_SIZE = 4096


def _labels(line: str) -> dict[str, str]:
    """The label set of a sample line (a shared dict: read it, never change it)."""
    start, close = line.find("{"), line.rfind("}")
    if start < 0 or close < start:
        return {}
    block = line[start + 1 : close]
    labels = _LABEL_CACHE.get(block)
    if labels is None:
        if len(_LABEL_CACHE) >= _LABEL_CACHE_SIZE:
            _LABEL_CACHE.clear()
        labels = _LABEL_CACHE[block] = _parse_labels(block, line)
    return labels


def _parse_labels(block: str, line: str) -> dict[str, str]:
    labels: dict[str, str] = {}
    pos = 0
    while pos < len(block):
        match = _LABEL.match(block, pos)
        if match is None:
            raise ValueError(f"bad label block in metric line {line[:120]!r}")
        value = match.group(2)
        if "\\" in value:
            value = re.sub(r"\\[\\\"n]", lambda m: _UNESCAPE[m.group(0)], value)
        labels[match.group(1)] = value
        pos = match.end()
    return labels


def routing_families_present(text: str, engine: str) -> bool:
    """Whether `text` has the queue and running families: a filtered answer without them
    comes from a server that does not filter (multiprocess mode: an empty page)."""
    names = ENGINES[engine]
    return all(
        any("# TYPE " + name + " " in text for name in names[key]) for key in ("waiting", "running")
    )


def _first(text: str, names: list[str], layout: PageLayout | None) -> float:
    """The first sample of the first name present; 0 when none is."""
    for name in names:
        for line in _lines(text, name, layout):
            value = _value(line)
            if math.isnan(value):
                raise ValueError(f"{name} is NaN")
            return value
    return 0.0


def _split(value: str | None) -> frozenset[str]:
    return frozenset(a for a in (value or "").split(",") if a)


def parse_metrics(text: str, engine: str = "vllm", layout: PageLayout | None = None) -> PodMetrics:
    """Parse one scrape. Missing metrics read as 0; unknown engines are a ValueError.
    `layout`: the pod's, kept by the caller from one scrape to the next (`PageLayout`).

    For several samples of one gauge (several label sets) the first in the page counts;
    of several `vllm:lora_requests_info` series the newest (its value is a timestamp),
    as upstream; of several cache-config series (the engine's own name) the last."""
    names = ENGINES.get(engine)
    if names is None:
        raise ValueError(f"unknown engine {engine!r} (known: {sorted(ENGINES)})")
    lora: dict[str, str] = {}
    if engine == "vllm":
        stamp = float("-inf")
        for line in _lines(text, LORA_INFO, layout):
            value = _value(line)
            if value >= stamp:
                stamp, lora = value, _labels(line)
    cache: dict[str, str] = {}
    if engine in CACHE_INFO:
        for line in _lines(text, CACHE_INFO[engine], layout):
            cache = _labels(line)
    block_size = cache.get("block_size") or cache.get("page_size") or "16"
    blocks = cache.get("num_gpu_blocks") or cache.get("num_pages") or "0"
    if layout is not None:
        layout.scrapes += 1
    return PodMetrics(
        waiting=int(_first(text, names["waiting"], layout)),
        running=int(_first(text, names["running"], layout)),
        kv_usage=_first(text, names["kv"], layout),
        running_adapters=_split(lora.get("running_lora_adapters")),
        waiting_adapters=_split(lora.get("waiting_lora_adapters")),
        max_loras=int(float(lora.get("max_lora") or 0)),
        block_size=int(float(block_size)),
        num_gpu_blocks=int(float(blocks)),
    )
