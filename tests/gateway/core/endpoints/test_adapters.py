"""The engine adapters read only the sample lines routing needs from a pod's metric text.

Reference: the general Prometheus text parser (`prometheus_client.parser`, which follows
the exposition format 0.0.4) must agree with the adapter on every page it can parse; the
adapter must also read pages where families routing never needs are malformed or
unknown to it, since it does not look at them (the cost of a real vLLM page is in them)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from inference_gateway.core.endpoints.adapters import ENGINES, PageLayout, parse_metrics
from inference_gateway.core.scheduling.types import PodMetrics

sys.path.insert(0, str(Path(__file__).resolve().parents[4] / "bench"))
from scrape_cost import legacy_parse, vllm_page

LABELS = 'engine="0",model_name="m"'


def reference(text: str, engine: str = "vllm") -> PodMetrics:
    """What the general parser makes of the page (the adapter's former code path)."""
    return legacy_parse(text, engine)


@pytest.mark.parametrize("lora", [False, True])
def test_a_real_size_vllm_page_matches_the_general_parser(lora: bool) -> None:
    page = vllm_page(lora=lora)
    assert len(page) > 40_000  # histograms included, as vLLM serves them
    parsed = parse_metrics(page)
    assert parsed == reference(page)
    assert (parsed.waiting, parsed.running, parsed.kv_usage) == (1, 3, 0.42)
    assert parsed.num_gpu_blocks == 26307
    assert parsed.running_adapters == (frozenset({"sql", "chat"}) if lora else frozenset())


PAGES = {
    "bare names": "vllm:num_requests_waiting 2\nvllm:num_requests_running 5\n"
    "vllm:kv_cache_usage_perc 0.5\n",
    "labels, timestamps, comments": (
        "# HELP vllm:num_requests_waiting Waiting.\n# TYPE vllm:num_requests_waiting gauge\n"
        f"vllm:num_requests_waiting{{{LABELS}}} 3.0 1700000000000\n"
        f"vllm:num_requests_running{{{LABELS}}} 4\n"
        f"vllm:gpu_cache_usage_perc{{{LABELS}}} 0.25\n"  # only the older alias
    ),
    "a longer name first": (
        'vllm:num_requests_waiting_by_reason{reason="capacity"} 9\n'
        f"vllm:num_requests_waiting{{{LABELS}}} 1\n"
    ),
    "several label sets, first wins": (
        'vllm:num_requests_running{engine="0"} 6\nvllm:num_requests_running{engine="1"} 8\n'
    ),
    "quotes, braces and spaces in label values": (
        'vllm:cache_config_info{block_size="32",note="a } b \\" c",num_gpu_blocks="77"} 1\n'
        'vllm:num_requests_waiting{model_name="odd } name"} 7\n'
    ),
    "newest LoRA series wins": (
        'vllm:lora_requests_info{max_lora="2",running_lora_adapters="a",'
        'waiting_lora_adapters=""} 1700000002\n'
        'vllm:lora_requests_info{max_lora="2",running_lora_adapters="b,c",'
        'waiting_lora_adapters="d"} 1700000009\n'
        'vllm:lora_requests_info{max_lora="2",running_lora_adapters="e",'
        'waiting_lora_adapters=""} 1700000005\n'
    ),
    "first line of the page": "vllm:num_requests_running 1",  # no trailing newline
    "nothing known": "python_info 1\n",
}


@pytest.mark.parametrize("name", sorted(PAGES))
def test_edge_pages_match_the_general_parser(name: str) -> None:
    assert parse_metrics(PAGES[name]) == reference(PAGES[name])


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_every_engine_reads_its_own_names(engine: str) -> None:
    names = ENGINES[engine]
    lines = [f"{names['waiting'][0]} 3", f"{names['running'][0]} 4"]
    lines += [f"{names['kv'][0]} 0.75"] if names["kv"] else []
    page = "\n".join(lines) + "\n"
    parsed = parse_metrics(page, engine)
    assert parsed == reference(page, engine)
    assert (parsed.waiting, parsed.running) == (3, 4)


def test_families_routing_does_not_read_are_not_parsed() -> None:
    """A histogram line the general parser rejects does not cost the pod its scrape:
    the adapter never looks at it."""
    page = vllm_page() + 'vllm:some_future_histogram_bucket{le="1.0" 12 oops\n'
    with pytest.raises(ValueError):
        list(text_string_to_metric_families(page))
    assert parse_metrics(page).running == 3


@pytest.mark.parametrize(
    "line",
    [
        "vllm:num_requests_waiting\n",  # no value
        'vllm:num_requests_waiting{a="1"} many\n',
        "vllm:num_requests_waiting NaN\n",
        "vllm:lora_requests_info{max_lora=2} 1\n",  # unquoted label value
    ],
)
def test_a_needed_line_that_does_not_parse_fails_the_scrape(line: str) -> None:
    """The scrape fails (the pod goes stale) rather than routing on a guess."""
    with pytest.raises(ValueError):
        parse_metrics(line)


def test_unknown_engine() -> None:
    with pytest.raises(ValueError, match="unknown engine"):
        parse_metrics("", "nope")


def test_a_pods_layout_follows_its_page_as_it_moves_and_grows() -> None:
    """With the pod's `PageLayout`, each scrape reads what a fresh parse reads: after
    families moved by more than the window (a longer page before them), and with a HELP
    text that quotes a TYPE line."""
    layout = PageLayout()
    page = vllm_page()
    assert parse_metrics(page, "vllm", layout) == parse_metrics(page)
    assert layout.at["# TYPE vllm:cache_config_info "] > 30_000
    moved = "# HELP x says # TYPE vllm:num_requests_running gauge\n# TYPE x gauge\n"
    moved += "x 1\n" * 2000 + vllm_page(tick=99).replace("3.0\n", "17.0\n", 1)
    parsed = parse_metrics(moved, "vllm", layout)
    assert parsed == parse_metrics(moved) and parsed.running == 17
    assert parsed.num_gpu_blocks == 26307


def test_a_family_a_pod_lacks_is_looked_for_again_every_recheck() -> None:
    """LoRA info absent at first: not searched on the scrapes after (the page is
    read where it was), found again at the next recheck once the page has it."""
    layout = PageLayout()
    parse_metrics(vllm_page(), "vllm", layout)
    with_lora = vllm_page(lora=True)
    seen = [parse_metrics(with_lora, "vllm", layout).max_loras for _ in range(PageLayout.RECHECK)]
    assert seen == [0] * (PageLayout.RECHECK - 1) + [4]
    untyped = "# a comment\nvllm:num_requests_running 5\n"  # an untyped sample counts
    assert parse_metrics(untyped, "vllm", PageLayout()).running == 5
