"""Scenario files (DESIGN §4): YAML, unknown keys are errors, every error names its field.

Shipped scenarios live in `scenarios/`; `load_scenario` takes a shipped name or a path.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Annotated, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from inference_gateway.config.spec import format_validation_error
from inference_gateway.errors import ConfigError

__all__ = ["Disaggregation", "Scenario", "load_scenario", "shipped_scenarios"]


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PoolSpec(_Spec):
    name: str
    gpu: str
    model: str
    replicas: int = Field(ge=1, le=4096)
    hourly_usd: float | None = Field(default=None, ge=0)
    tp: int | None = Field(default=None, ge=1, le=8)
    max_loras: int = Field(default=0, ge=0)
    adapters: list[str] = Field(default_factory=list)


class PoissonArrival(_Spec):
    kind: Literal["poisson"]
    load: float | None = Field(default=None, gt=0, le=5)
    rate_rps: float | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _one_rate(self) -> PoissonArrival:
        if (self.load is None) == (self.rate_rps is None):
            raise ValueError("set exactly one of load or rate_rps")
        return self


class BurstyArrival(_Spec):
    """On-off arrivals: `burst_factor` × the base rate for `burst_s` of every `period_s`,
    the base rate chosen so the long-run mean is `load` of capacity."""

    kind: Literal["bursty"]
    load: float = Field(gt=0, le=5)
    burst_factor: float = Field(gt=1)
    burst_s: float = Field(gt=0)
    period_s: float = Field(gt=0)

    @model_validator(mode="after")
    def _burst_fits(self) -> BurstyArrival:
        if self.burst_s >= self.period_s:
            raise ValueError("burst_s must be shorter than period_s")
        return self


class TraceArrival(_Spec):
    kind: Literal["trace"]
    path: str


class LogNormal(_Spec):
    dist: Literal["lognormal"]
    median: float = Field(gt=0)
    sigma: float = Field(ge=0)
    max: int | None = Field(default=None, ge=1)


class Fixed(_Spec):
    dist: Literal["fixed"]
    value: int = Field(ge=1)


Length = Annotated[LogNormal | Fixed, Field(discriminator="dist")]


class SharedPrefixes(_Spec):
    share: float = Field(ge=0, le=1)
    groups: int = Field(ge=1)
    tokens: int = Field(ge=16)


class Seconds(_Spec):
    """A positive duration drawn from a lognormal (median, sigma) in seconds."""

    median: float = Field(gt=0)
    sigma: float = Field(default=0.0, ge=0)


class Conversations(_Spec):
    """Multi-turn chat sessions: the arrival process starts *sessions*; each turn's prompt
    is the previous turn's prompt + its answer + a new user message, and the next turn
    arrives `think_time_s` after the answer finished (closed loop per session). A
    session's system prompt is one of `shared_prefixes`' groups when that is set (drawn
    with its `share`), and `prompt_tokens` is the first message's length."""

    turns: Length
    think_time_s: Seconds
    message_tokens: Length
    max_context_tokens: int = Field(default=32_000, ge=64)


class Adapters(_Spec):
    share: float = Field(ge=0, le=1)
    names: list[str] = Field(min_length=1)
    zipf: float = Field(default=1.0, ge=0)


class Priorities(_Spec):
    critical: float = Field(default=0, ge=0)
    standard: float = Field(default=1, ge=0)
    sheddable: float = Field(default=0, ge=0)


class Workload(_Spec):
    arrival: Annotated[PoissonArrival | BurstyArrival | TraceArrival, Field(discriminator="kind")]
    prompt_tokens: Length = LogNormal(dist="lognormal", median=800, sigma=0.8)
    output_tokens: Length = LogNormal(dist="lognormal", median=150, sigma=0.6)
    shared_prefixes: SharedPrefixes | None = None
    conversations: Conversations | None = None
    adapters: Adapters | None = None
    priorities: Priorities | None = None

    @model_validator(mode="after")
    def _sessions_by_rate(self) -> Workload:
        if self.conversations is not None and not (
            isinstance(self.arrival, PoissonArrival) and self.arrival.rate_rps is not None
        ):
            raise ValueError(
                "conversations: start sessions with arrival {kind: poisson, rate_rps: "
                "SESSIONS_PER_S} (a load fraction would count first turns only)"
            )
        return self


class Disaggregation(_Spec):
    """The scenario's P/D split (llm-d's convention, `core.scheduling.pd`): in every pool
    named in `prefill`, that many pods carry `llm-d.ai/role: prefill` and the rest
    `llm-d.ai/role: decode` (other pools stay unlabelled, decode-capable). A policy with
    the P/D profiles (`gateway-pd`) then prefills a request on a prefill pod and decodes it
    on a decode pod when its non-cached prompt tokens on the chosen decode pod reach
    `non_cached_tokens` (the `prefix-based-pd-decider`'s `nonCachedTokens`; 0 = always);
    a policy without them (`gateway`) serves every request whole on whichever pod, so the
    same GPUs compare aggregated and split."""

    prefill: dict[str, int] = Field(min_length=1)
    non_cached_tokens: int = Field(default=512, ge=0)


class PodFailure(_Spec):
    """A pod lost mid-run (a spot reclaim, an OOM kill, a node gone without a drain): at
    `at_s` its engine and every request on it are gone; `down_s` later its replacement,
    empty, takes traffic again."""

    at_s: float = Field(ge=0)
    pod: str = Field(min_length=1, description="the pod's name, POOL-REPLICA (h100-0)")
    down_s: float = Field(default=60, gt=0)


class Faults(_Spec):
    """Pod failures on the virtual clock (`sim.faults`), and whether the gateway resumes
    a stream that broke after its first token on another pod (docs/migration.md; false:
    each such stream is lost, as before resume on break)."""

    failures: list[PodFailure] = Field(min_length=1)
    resume: bool = True


class Scenario(_Spec):
    name: str
    description: str = ""
    seed: int = 0
    duration_s: float = Field(gt=0, le=7 * 86400)
    scrape_interval_ms: float = Field(default=50, gt=0)
    fleet: list[PoolSpec] = Field(min_length=1)
    workload: Workload
    disaggregation: Disaggregation | None = None
    faults: Faults | None = None
    policies: list[str] = Field(
        default_factory=lambda: ["gateway", "round-robin", "upstream-default", "oracle"]
    )

    @model_validator(mode="after")
    def _adapters_served(self) -> Scenario:
        adapters = self.workload.adapters
        if adapters:
            served = {a for pool in self.fleet if pool.max_loras for a in pool.adapters}
            missing = [a for a in adapters.names if a not in served]
            if missing:
                raise ValueError(
                    f"workload.adapters.names: {missing} not served by any pool with max_loras"
                )
        return self

    @model_validator(mode="after")
    def _split_fits(self) -> Scenario:
        if self.disaggregation is None:
            return self
        pools = {pool.name: pool.replicas for pool in self.fleet}
        for name, count in self.disaggregation.prefill.items():
            if name not in pools:
                raise ValueError(f"disaggregation.prefill.{name}: no such pool in fleet")
            if not 1 <= count < pools[name]:
                raise ValueError(
                    f"disaggregation.prefill.{name}: {count} prefill pods of {pools[name]}: "
                    "keep at least one of each role"
                )
        return self

    @model_validator(mode="after")
    def _faults_fit(self) -> Scenario:
        if self.faults is None:
            return self
        names = {f"{pool.name}-{i}" for pool in self.fleet for i in range(pool.replicas)}
        for n, failure in enumerate(self.faults.failures):
            if failure.pod not in names:
                raise ValueError(f"faults.failures[{n}].pod: no pod {failure.pod!r} in fleet")
        return self


def shipped_scenarios() -> dict[str, str]:
    """Shipped scenario name → first line of its description."""
    out = {}
    for entry in resources.files(__package__).joinpath("scenarios").iterdir():
        if entry.name.endswith(".yaml"):
            data = yaml.safe_load(entry.read_text()) or {}
            out[entry.name[:-5]] = str(data.get("description", "")).split("\n")[0]
    return dict(sorted(out.items()))


def load_scenario(name_or_path: str) -> Scenario:
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") or path.exists():
        source = str(path)
        try:
            text = path.read_text()
        except OSError as error:
            raise ConfigError(source, [f"<root>: cannot read file: {error.strerror}"]) from None
    else:
        entry = resources.files(__package__).joinpath("scenarios").joinpath(f"{name_or_path}.yaml")
        if not entry.is_file():
            raise ConfigError(
                name_or_path,
                [f"<name>: no shipped scenario {name_or_path!r} (see igw simulate --list)"],
            )
        source, text = f"scenario {name_or_path}", entry.read_text()
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise ConfigError(source, [f"<yaml>: {error}"]) from None
    if not isinstance(data, dict):
        raise ConfigError(source, ["<root>: expected a mapping"])
    try:
        scenario = Scenario.model_validate(data)
    except ValidationError as error:
        raise ConfigError(source, format_validation_error(error)) from None
    arrival = scenario.workload.arrival
    if isinstance(arrival, TraceArrival) and not Path(arrival.path).is_absolute():
        base = path.parent if path.exists() else Path.cwd()
        object.__setattr__(arrival, "path", str(base / arrival.path))
    return scenario
