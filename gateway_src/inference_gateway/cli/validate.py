"""`igw validate FILE…`: check config files without starting anything.

Each file is read by the very loader the command that reads it runs (`igw serve
--config` → `config_checks.load_config`, and so on), so a file that passes here starts
there, and a file that fails prints the same field paths the server would print. What a
PR check or a pre-commit hook calls (`.pre-commit-hooks.yaml`, `make validate`):

    igw validate gitops/environments/prod/environment.yaml examples/fleet/*.yaml
    igw validate --kind config picker-config.yaml

The kind of each file is told from its content (`kind:` of a Kubernetes resource, else
its top-level keys) unless `--kind` names it. Files given together are one deployment:
InferenceModelRewrite targets are checked against the models of the configs beside them,
as `igw serve --config C --rewrites R` does. Environment files (gitops/environments/
<env>/environment.yaml) belong to the platform repository, not to this package: they
are checked by the validator the repository's own project registers under the entry
point group `inference_gateway.validators` (its `envspec`), present wherever the
repository is installed (`make venv`).

Exit status: 0 every file is valid, 2 any is not (or its kind is unknown).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import yaml

from inference_gateway.cli.messages import config_error_lines
from inference_gateway.errors import ConfigError

__all__ = ["KINDS", "Kind", "detect", "register", "validate_files"]

PLUGIN_GROUP = "inference_gateway.validators"


@dataclass(frozen=True)
class Kind:
    """One kind of file: its name, the command that reads it, how to tell it from its
    parsed documents, and the loader (raises ConfigError)."""

    name: str
    read_by: str
    matches: Callable[[list[Any]], bool]
    load: Callable[[Path, set[str] | None], object]


def _one(docs: list[Any]) -> dict[str, Any] | None:
    return docs[0] if len(docs) == 1 and isinstance(docs[0], dict) else None


def _has(*keys: str, without: tuple[str, ...] = ()) -> Callable[[list[Any]], bool]:
    def matches(docs: list[Any]) -> bool:
        doc = _one(docs)
        return (
            doc is not None and all(k in doc for k in keys) and not any(k in doc for k in without)
        )

    return matches


def _is_config(docs: list[Any]) -> bool:
    from inference_gateway.config.spec import GatewayConfigSpec

    doc = _one(docs)
    if doc is None:
        return False
    if doc.get("kind") == "InferenceGatewayConfig":
        return True
    fields = {f.alias or name for name, f in GatewayConfigSpec.model_fields.items()}
    return "kind" not in doc and bool(doc) and set(doc) <= fields


def _is_global(docs: list[Any]) -> bool:
    """`igw global`'s config: clusters, or the managed Global Inference Gateway's members."""
    return _has("clusters", without=("workload",))(docs) or _has("gateways")(docs)


def _is_rewrites(docs: list[Any]) -> bool:
    return bool(docs) and all(
        isinstance(d, dict) and d.get("kind") == "InferenceModelRewrite" for d in docs
    )


def _is_jwks(docs: list[Any]) -> bool:
    doc = _one(docs)
    keys = doc.get("keys") if doc else None
    return isinstance(keys, list) and all(isinstance(k, dict) and "kty" in k for k in keys)


def _is_api_keys(docs: list[Any]) -> bool:
    return _has("keys")(docs) and not _is_jwks(docs)


def _load_config(path: Path, _: set[str] | None) -> object:
    from inference_gateway.core.scheduling.config_checks import load_config

    return load_config(path)


def _load_rewrites(path: Path, models: set[str] | None) -> object:
    from inference_gateway.core.traffic.rewrites import load_rewrites

    return load_rewrites(path, known_models=models)


def _load_endpoints(path: Path, _: set[str] | None) -> object:
    from inference_gateway.core.endpoints.discovery import load_endpoints_file

    return load_endpoints_file(path)


def _load_fleet(path: Path, _: set[str] | None) -> object:
    from inference_gateway.emulator.fleet import EmulatedFleet, load_fleet

    return EmulatedFleet(load_fleet(path), source=str(path))  # profiles and fit, as at start


def _load_api_keys(path: Path, _: set[str] | None) -> object:
    from inference_gateway.frontends.auth import load_api_keys

    return load_api_keys(path)


def _load_jwks(path: Path, _: set[str] | None) -> object:
    from inference_gateway.frontends.auth import Authenticator, JwtSettings

    return Authenticator(None, JwtSettings(issuer="-", audiences=("-",), jwks_path=path))


def _load_backends(path: Path, _: set[str] | None) -> object:
    from inference_gateway.backend_bench.spec import load_bench_spec

    return load_bench_spec(path)


def _load_scenario(path: Path, _: set[str] | None) -> object:
    from inference_gateway.sim.scenario import load_scenario

    return load_scenario(str(path))


def _load_fleet_scenario(path: Path, _: set[str] | None) -> object:
    from inference_gateway.sim.fleet.scenario import load_fleet_scenario

    return load_fleet_scenario(str(path))


def _load_global(path: Path, _: set[str] | None) -> object:
    from inference_gateway.config.global_router import load_router_config

    return load_router_config(path)


def _served(config: Any) -> set[str]:
    """The names a rewrite may target (models and adapters), as the servers count them."""
    from inference_gateway.assembly.config_watch import known_models

    return known_models(config) or set()


def _is_manifests(docs: list[Any]) -> bool:
    return bool(docs) and all(isinstance(d, dict) and "apiVersion" in d for d in docs)


@dataclass
class Manifests:
    """What igw reads of a rendered file: its InferenceModelRewrites wait for the models
    of every file given (a tree's configs and rewrites sit in different files)."""

    models: set[str]
    rewrites: list[dict[str, Any]]
    checked: list[str]


def _load_manifests(path: Path, _: set[str] | None) -> Manifests:
    """A rendered tree's file or folder (gitops/environments/<env>/rendered/): what igw
    reads of it, as it reads it in the cluster: InferenceGatewayConfig resources (the
    picker's Kubernetes mode) and the configs mounted from ConfigMaps (`igw picker
    --config`, `igw global --config`). A ConfigMap value that is an External Secrets
    template (`{{ … }}`) is the Secret's source, not a config, and is left out."""
    from inference_gateway.config.global_router import parse_router_config
    from inference_gateway.core.scheduling.config_checks import parse_config

    out = Manifests(set(), [], [])
    problems: list[str] = []
    for doc in _documents(path):
        name = f"{doc.get('kind')} {(doc.get('metadata') or {}).get('name', '?')}"
        try:
            if doc.get("kind") == "InferenceGatewayConfig":
                out.models |= _served(parse_config(doc, name))
                out.checked.append(name)
            elif doc.get("kind") == "InferenceModelRewrite":
                out.rewrites.append(doc)
            elif doc.get("kind") == "ConfigMap":
                for key, text in (doc.get("data") or {}).items():
                    if not key.endswith((".yaml", ".yml")) or "{{" in text:
                        continue
                    data = yaml.safe_load(text)
                    if _has("clusters")([data]):
                        parse_router_config(data, f"{name} {key}")
                    elif _is_config([data]):
                        out.models |= _served(parse_config(data, f"{name} {key}"))
                    else:
                        continue
                    out.checked.append(f"{name} {key}")
        except ConfigError as error:
            problems += [f"{error.source}: {p}" for p in error.problems]
    if problems:
        raise ConfigError(str(path), problems)
    return out


#: this package's kinds, most specific first (detection takes the first that matches)
KINDS = [
    Kind("rewrites", "igw serve/picker --rewrites", _is_rewrites, _load_rewrites),
    Kind("endpoints", "igw serve/picker --endpoints", _has("endpoints"), _load_endpoints),
    Kind("fleet", "igw emulate --fleet", _has("pods"), _load_fleet),
    Kind("jwks", "igw serve/auth --jwt-jwks", _is_jwks, _load_jwks),
    Kind("api-keys", "igw serve/auth --api-keys", _is_api_keys, _load_api_keys),
    Kind("backends", "igw bench backends", _has("backends"), _load_backends),
    Kind(
        "fleet-scenario",
        "igw simulate",
        _has("clusters", "workload"),
        _load_fleet_scenario,
    ),
    Kind("scenario", "igw simulate", _has("fleet", "workload"), _load_scenario),
    Kind("global", "igw global --config", _is_global, _load_global),
    Kind("config", "igw serve/picker/bbr --config", _is_config, _load_config),
    Kind("manifests", "igw picker and igw global in the cluster", _is_manifests, _load_manifests),
]


def plugin_kinds() -> list[Kind]:
    """Kinds other installed projects register (the platform repository: `environment`).
    An entry point names an object with `kind`, `read_by`, `matches(document)` and
    `load(path)`."""
    found = []
    for point in entry_points(group=PLUGIN_GROUP):
        plugin = point.load()
        found.append(
            Kind(plugin.kind, plugin.read_by, _plugin_matches(plugin), _plugin_load(plugin))
        )
    return found


def _plugin_matches(plugin: Any) -> Callable[[list[Any]], bool]:
    def matches(docs: list[Any]) -> bool:
        doc = _one(docs)
        return doc is not None and bool(plugin.matches(doc))

    return matches


def _plugin_load(plugin: Any) -> Callable[[Path, set[str] | None], object]:
    def load(path: Path, _: set[str] | None) -> object:
        return plugin.load(path)

    return load


def _documents(path: Path) -> list[Any]:
    """The file's YAML documents (JSON is YAML), or every *.yaml of a folder."""
    from inference_gateway.config.spec import read_yaml

    if path.is_dir():
        return [d for f in sorted(path.glob("*.yaml")) for d in _documents(f)]
    found: list[Any] = read_yaml(path, documents=True)  # the loaders' own ConfigErrors
    return found


def detect(path: Path, kinds: list[Kind]) -> Kind:
    docs = _documents(path)
    for kind in kinds:
        if kind.matches(docs):
            return kind
    names = ", ".join(k.name for k in kinds)
    raise ConfigError(str(path), [f"<root>: not a file igw knows (give --kind, one of: {names})"])


def validate_files(
    paths: list[Path], kind_name: str | None = None, *, out: Any = None, err: Any = None
) -> int:
    """Validate every file; print one line per valid file (stdout) and the loader's
    problems for each invalid one (stderr). 0 when all are valid, else 2.

    InferenceModelRewrites are checked last, against the models of every config given
    (`igw serve --config C --rewrites R` checks R against C's models)."""
    out = out or sys.stdout
    err = err or sys.stderr
    kinds = [*KINDS, *plugin_kinds()]
    by_name = {k.name: k for k in kinds}
    if kind_name is not None and kind_name not in by_name:
        print(f"igw validate: --kind {kind_name}: one of {', '.join(by_name)}", file=err)
        return 2
    failed = False

    def problem(error: ConfigError) -> None:
        nonlocal failed
        print("\n".join(config_error_lines("igw validate", error)), file=err)
        failed = True

    found: list[tuple[Path, Kind]] = []
    for path in paths:
        try:
            found.append((path, by_name[kind_name] if kind_name else detect(path, kinds)))
        except ConfigError as error:
            problem(error)
    models: set[str] = set()
    waiting: list[tuple[Path, Kind, list[dict[str, Any]], str]] = []
    for path, kind in found:
        if kind.name == "rewrites":
            waiting.append((path, kind, [], ""))
            continue
        try:
            loaded = kind.load(path, None)
        except ConfigError as error:
            problem(error)
            continue
        if isinstance(loaded, Manifests):
            models |= loaded.models
            checked = ", ".join(loaded.checked) or "nothing igw reads"
            waiting.append((path, kind, loaded.rewrites, checked))
            continue
        if kind.name == "config":
            models |= _served(loaded)
        print(f"{path}: ok ({kind.name}; read by {kind.read_by})", file=out)
    from inference_gateway.core.traffic.rewrites import parse_rewrites

    for path, kind, rewrites, checked in waiting:
        try:
            if kind.name == "rewrites":
                kind.load(path, models or None)
            elif rewrites:
                parse_rewrites(rewrites, known_models=models or None, source=str(path))
                checked += f", {len(rewrites)} InferenceModelRewrite(s)"
        except ConfigError as error:
            problem(error)
            continue
        what = f"{kind.name}: {checked}" if checked else kind.name
        print(f"{path}: ok ({what}; read by {kind.read_by})", file=out)
    return 2 if failed else 0


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "validate",
        help="check config files without starting anything (exit 0 valid, 2 not)",
        description="Check routing configs, rewrites, endpoints, fleet, key and JWKS files, "
        "scenarios, global-router configs and environment files with the loaders the "
        "commands that read them run: the same field paths, nothing started. For a PR "
        "check or a pre-commit hook.",
    )
    parser.add_argument("files", nargs="+", metavar="FILE", type=Path)
    parser.add_argument("--kind", help="the files' kind, when it cannot be told from their content")
    parser.set_defaults(handler=lambda args: validate_files(args.files, args.kind))
