"""The scheduling contracts: what a request and a pod look like to the picker, and the
plugin interfaces. Implementations live one per module beside this one.

Nothing here imports a data plane, a web framework or AWS: the same objects are filled
by the HTTP proxy, the ext_proc server and the simulator.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from inference_gateway.core.scheduling.explain import Explanation
    from inference_gateway.core.scheduling.kv_index import KVBlockIndex
    from inference_gateway.core.scheduling.plugins.prefix import PrefixIndex

__all__ = [
    "Endpoint",
    "Filter",
    "LLMRequest",
    "Picker",
    "PluginContext",
    "PodMetrics",
    "SchedulingObserver",
    "Scorer",
]


@dataclass(frozen=True, slots=True)
class PodMetrics:
    """One scrape of one pod, engine-neutral (see endpoints.adapters for the names)."""

    waiting: int = 0
    running: int = 0
    kv_usage: float = 0.0
    running_adapters: frozenset[str] = frozenset()
    waiting_adapters: frozenset[str] = frozenset()
    max_loras: int = 0
    block_size: int = 16
    num_gpu_blocks: int = 0


@dataclass(slots=True, eq=False)
class Endpoint:
    """A model-server pod as the picker sees it: identity, last scrape, own bookkeeping.

    `sent_requests` / `sent_tokens` count what this picker dispatched since the last
    scrape and has not produced a first token yet (so probably waits or prefills at the
    pod), so a burst inside one scrape interval does not herd onto the pod that looked
    best at the last scrape. `inflight` counts every request
    dispatched and not yet finished. `scrape_seq` numbers the scrapes.
    `prefill_tokens` counts the prompt tokens this picker dispatched that have no first
    token yet (waiting or being prefilled; never reset by a scrape) and
    `prefill_s_per_token` is the pod's measured prefill speed (0 until measured): their
    product is the prefill a new request queues behind (the saturation detector's term).
    `peer_requests` / `peer_prefill_tokens` are the same two counts summed over the other
    gateway replicas (their `sent_requests` and `prefill_tokens` for this pod, shared
    through the store a few milliseconds late; 0 with one replica): the picking adds
    them to its own, so N replicas pick like one (`scheduling.shared_view`).
    """

    name: str
    address: str
    port: int
    pool: str = ""
    labels: dict[str, str] = field(default_factory=dict)
    models: frozenset[str] = frozenset()  # served model names; empty = not yet known
    metrics: PodMetrics | None = None
    scraped_at: float = float("-inf")  # time of the last good scrape
    stale: bool = True
    sent_requests: int = 0
    sent_tokens: int = 0
    inflight: int = 0
    prefill_tokens: int = 0
    prefill_s_per_token: float = 0.0
    peer_requests: int = 0
    peer_prefill_tokens: int = 0
    scrape_seq: int = 0
    index: int = 0  # position in its store, for array-based bookkeeping

    @property
    def hostport(self) -> str:
        return f"{self.address}:{self.port}"

    def serves(self, model: str) -> bool:
        return not self.models or model in self.models

    def record_scrape(self, metrics: PodMetrics, at: float) -> None:
        """A good scrape taken at `at`: the pod is fresh, and what this picker sent before
        it is in the scraped queue now, so the sent-since-scrape counts start again.

        The one place a scrape lands: the endpoint store's scraper, the simulator's
        scrape and a simulated replica's copy of it all call this, so the bookkeeping
        the scheduler relies on (`scrape_seq`, see `Scheduler._started`) is the same."""
        self.metrics = metrics
        self.scraped_at = at
        self.stale = False
        self.sent_requests = 0
        self.sent_tokens = 0
        self.scrape_seq += 1


@dataclass(slots=True)
class LLMRequest:
    """A request as scheduling sees it, after model routing."""

    request_id: str
    model: str  # the model name sent to the pod (base model or adapter)
    prompt_tokens: int = 0  # estimated
    prefix_hashes: Sequence[int] = ()  # router blocks of the prompt, chained hashes
    adapter: str | None = None
    band: str = "standard"
    fairness_id: str = ""
    profile: str | None = None
    subset: frozenset[str] | None = None  # Envoy subset hint: allowed "ip:port"s
    prefix_matches: dict[str, int] | None = None  # pod → leading blocks cached (per cycle)
    # the parsed body's prompt (messages or prompt), for scorers that tokenize it
    prompt_body: Mapping[str, Any] | None = None
    kv_hashes: Sequence[int] | None = None  # engine block hashes (None: not computed yet)
    # the pod a P/D request's prefill leg runs on (`Scheduler.schedule_prefill`); None:
    # aggregated, or the prefill leg failed and the decode pod prefills after all
    prefill_pod: str | None = None
    # what the scheduling cycle saw, kept for traces and `igw explain` (explain.py);
    # None: nobody asks (the simulator), and the cycle keeps nothing
    explanation: Explanation | None = None

    @property
    def remote_prefill(self) -> bool:
        """Whether the prompt is prefilled on another pod than the one that decodes."""
        return self.prefill_pod is not None


class Filter(Protocol):
    name: str

    def filter(self, request: LLMRequest, endpoints: list[Endpoint]) -> list[Endpoint]: ...


class Scorer(Protocol):
    name: str

    def score(self, request: LLMRequest, endpoints: list[Endpoint]) -> list[float]:
        """One score in [0, 1] per endpoint, higher is better."""
        ...


class Picker(Protocol):
    name: str

    def pick(
        self, request: LLMRequest, endpoints: list[Endpoint], scores: list[float]
    ) -> list[Endpoint]:
        """Endpoints ranked best first (the first is the target, the rest fallbacks)."""
        ...


@runtime_checkable
class SchedulingObserver(Protocol):
    """Plugins that learn from outcomes (the TTFT predictor) implement this."""

    def on_picked(self, request: LLMRequest, endpoint: Endpoint, now: float) -> None: ...

    def on_first_token(
        self, request: LLMRequest, endpoint: Endpoint, ttft_s: float, now: float
    ) -> None: ...

    def on_finished(self, request: LLMRequest, endpoint: Endpoint, now: float) -> None:
        """The request ended (done, failed or cancelled); always called once after a pick."""
        ...


@dataclass(frozen=True, slots=True)
class PluginContext:
    """What the scheduler shares with every plugin it builds: its prefix index (updated
    after each pick), the seed of random tie-breaks, whether in-flight requests count as
    queued, the GPU priors of the TTFT predictor, and the index of the pods' KV events.
    Config validation builds plugins with a context of its own
    (`registry.validation_context`) and throws them away."""

    index: PrefixIndex
    seed: int | None = None
    count_inflight: bool = True
    priors: Mapping[str, float] = field(default_factory=dict)
    kv_index: KVBlockIndex | None = None  # the pods' KV events (precise prefix scorer)
