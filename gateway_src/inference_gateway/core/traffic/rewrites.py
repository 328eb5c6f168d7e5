"""InferenceModelRewrite: weighted splits of a client-facing model name, for canaries.

Shape (upstream `inference.networking.x-k8s.io/v1alpha2`):

    spec:
      poolRef: {name: my-pool}          # optional here
      rules:
        - matches: [{model: {type: Exact, value: chat}}]   # no matches: catch-all
          targets: [{modelRewrite: chat-v1, weight: 90}, {modelRewrite: chat-v2, weight: 10}]

Precedence: a rule with an exact match beats a catch-all; between rules of the same
kind, the older resource (creationTimestamp, then name) wins. A target is drawn
weighted-random. The proxy writes the client's name back into responses. A `RewriteSet`
is immutable: reloading builds a new one and swaps it in, so requests in flight keep
the rules they started with.
"""

from __future__ import annotations

import bisect
import itertools
import random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic.alias_generators import to_camel

from inference_gateway.config.spec import (
    MAX_CONFIG_BYTES,
    SAFE_LOADER,
    format_validation_error,
    read_capped,
)
from inference_gateway.errors import ConfigError

__all__ = ["RewriteSet", "load_rewrites", "parse_rewrites"]


class _Spec(BaseModel):
    model_config = ConfigDict(
        extra="forbid", alias_generator=to_camel, populate_by_name=True, frozen=True
    )


class ModelMatch(_Spec):
    type: Literal["Exact"] = "Exact"
    value: str


class Match(_Spec):
    model: ModelMatch


class Target(_Spec):
    model_rewrite: str
    weight: int = Field(default=1, ge=0, le=1_000_000)


class Rule(_Spec):
    matches: list[Match] = Field(default_factory=list)
    targets: list[Target] = Field(min_length=1)

    @model_validator(mode="after")
    def _weights(self) -> Rule:
        if sum(t.weight for t in self.targets) <= 0:
            raise ValueError("targets: weights sum to zero")
        return self


class PoolRef(_Spec):
    name: str
    group: str | None = None
    kind: str | None = None


class RewriteSpec(_Spec):
    pool_ref: PoolRef | None = None
    rules: list[Rule] = Field(min_length=1)


@dataclass(frozen=True, slots=True)
class _Compiled:
    exact: bool
    age: tuple[str, str]  # (creationTimestamp, name): smaller is older
    targets: tuple[str, ...]
    cdf: tuple[float, ...]


class RewriteSet:
    def __init__(
        self,
        rules: Mapping[str, list[_Compiled]],
        catch_all: list[_Compiled],
        seed: int | None = None,
    ) -> None:
        self._rules = rules
        self._catch_all = catch_all
        self._random = random.Random(seed)

    @classmethod
    def empty(cls) -> RewriteSet:
        return cls({}, [])

    def __bool__(self) -> bool:
        return bool(self._rules or self._catch_all)

    def rewrite(self, model: str) -> str:
        """The model to send to the pool for a request that asked for `model`."""
        candidates = self._rules.get(model) or self._catch_all
        if not candidates:
            return model
        rule = candidates[0]
        i = bisect.bisect_left(rule.cdf, self._random.random())
        return rule.targets[min(i, len(rule.targets) - 1)]

    def targets(self) -> set[str]:
        rules = itertools.chain(
            itertools.chain.from_iterable(self._rules.values()), self._catch_all
        )
        return {t for rule in rules for t in rule.targets}


def parse_rewrites(
    documents: Iterable[Mapping[str, Any]],
    *,
    known_models: set[str] | None,
    source: str = "<rewrites>",
    seed: int | None = None,
) -> RewriteSet:
    """Validate InferenceModelRewrite resources; unknown target models are errors."""
    exact: dict[str, list[_Compiled]] = {}
    catch_all: list[_Compiled] = []
    problems: list[str] = []
    for n, doc in enumerate(documents):
        where = f"[{n}]"
        if not isinstance(doc, Mapping) or doc.get("kind") != "InferenceModelRewrite":
            problems.append(f"{where}.kind: expected InferenceModelRewrite")
            continue
        meta = doc.get("metadata") or {}
        try:
            spec = RewriteSpec.model_validate(doc.get("spec") or {})
        except ValidationError as error:
            problems += format_validation_error(error, f"{where}.spec")
            continue
        age = (str(meta.get("creationTimestamp") or ""), str(meta.get("name") or n))
        for r, rule in enumerate(spec.rules):
            for t, target in enumerate(rule.targets):
                if known_models is not None and target.model_rewrite not in known_models:
                    problems.append(
                        f"{where}.spec.rules[{r}].targets[{t}].modelRewrite: "
                        f"unknown model {target.model_rewrite!r}"
                    )
            total = sum(t.weight for t in rule.targets)
            cdf = tuple(itertools.accumulate(t.weight / total for t in rule.targets))
            compiled = _Compiled(
                bool(rule.matches), age, tuple(t.model_rewrite for t in rule.targets), cdf
            )
            if rule.matches:
                for match in rule.matches:
                    exact.setdefault(match.model.value, []).append(compiled)
            else:
                catch_all.append(compiled)
    if problems:
        raise ConfigError(source, problems)
    for rules in exact.values():
        rules.sort(key=lambda c: c.age)
    catch_all.sort(key=lambda c: c.age)
    return RewriteSet(exact, catch_all, seed)


def load_rewrites(
    path: str | Path, *, known_models: set[str] | None, seed: int | None = None
) -> RewriteSet:
    """Read every YAML document of a file (or every *.yaml file of a folder), at most
    `MAX_CONFIG_BYTES` in all (one ConfigMap's worth)."""
    path = Path(path)
    files = sorted(path.glob("*.yaml")) if path.is_dir() else [path]
    documents: list[Any] = []
    total = 0
    for file in files:
        data = read_capped(file, MAX_CONFIG_BYTES)
        total += len(data)
        if total > MAX_CONFIG_BYTES:
            raise ConfigError(
                str(path), [f"<root>: the files are over the limit of {MAX_CONFIG_BYTES} bytes"]
            )
        try:
            text = data.decode("utf-8")
            documents += [d for d in yaml.load_all(text, Loader=SAFE_LOADER) if d]
        except yaml.YAMLError as error:
            raise ConfigError(str(file), [f"<yaml>: {error}"]) from None
    return parse_rewrites(documents, known_models=known_models, source=str(path), seed=seed)
