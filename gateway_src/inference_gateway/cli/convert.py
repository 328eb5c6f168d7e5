"""`igw convert FILE [--to native|managed]`: an InferenceGatewayConfig between the
managed add-on's shape (`inference.sagemaker.aws.amazon.com/v1alpha1`) and this
project's (`inference.igw.dev/v1alpha1`), both ways, printed as YAML.

The direction is the other shape than the file's own (told from its `apiVersion`);
`--to` forces it. Where the two shapes overlap the conversion is exact; each field the
target shape cannot carry is named on stderr (and kept in the managed resource's
`igw.dev/native` annotation, so native → managed → native gives the file back,
`config/convert.py`); a field this project cannot honour is refused with its field
path, exit 2, nothing printed. docs/managed-gateway.md has the field-by-field table.

Environment files (gitops/environments/<env>/environment.yaml, whose `gateway:` may be
either shape) belong to the platform repository: their converter is the one its
project registers under the entry point group `inference_gateway.converters`
(`envspec.convert`), as `igw validate` finds the repository's environment check.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import yaml

from inference_gateway.errors import ConfigError

__all__ = ["convert_file", "plugin_converters", "register"]

PLUGIN_GROUP = "inference_gateway.converters"


def plugin_converters() -> list[Any]:
    """Converters other installed projects register: objects with `kind`,
    `matches(document)` and `convert(document, to, source) -> (document, notes)`."""
    return [point.load() for point in entry_points(group=PLUGIN_GROUP)]


def _is_config(doc: Mapping[str, Any]) -> bool:
    """A config as `igw validate` tells one (an InferenceGatewayConfig or a bare spec)."""
    from inference_gateway.cli.validate import KINDS

    return next(k for k in KINDS if k.name == "config").matches([doc])


def convert_file(path: Path, to: str | None) -> tuple[dict[str, Any], list[str]]:
    """The file's document in the other shape, and the notes; ConfigError when the file
    cannot be read, is neither shape, or holds a field that cannot be accepted."""
    from inference_gateway.config.convert import convert_resource
    from inference_gateway.config.spec import read_yaml
    from inference_gateway.core.scheduling.config_checks import plugin_problems

    doc = read_yaml(path)
    source = str(path)
    if not isinstance(doc, Mapping):
        raise ConfigError(source, ["<root>: expected a mapping (one YAML document)"])
    for plugin in plugin_converters():
        if plugin.matches(doc):
            out, notes = plugin.convert(doc, to, source)
            return dict(out), list(notes)
    if "gateway" in doc and {"aws", "cluster"} <= set(doc):
        raise ConfigError(
            source,
            [
                "<root>: an environment file, whose converter comes with the repository's "
                "own project (`make venv` installs it); none is installed here"
            ],
        )
    if not _is_config(doc):
        raise ConfigError(
            source,
            [
                "<root>: not an InferenceGatewayConfig (inference.igw.dev or "
                "inference.sagemaker.aws.amazon.com) nor an environment file"
            ],
        )
    return convert_resource(doc, to, source, checks=plugin_problems)


def _run(args: argparse.Namespace) -> int:
    out, notes = convert_file(args.file, args.to)
    sys.stdout.write(yaml.safe_dump(out, sort_keys=False, allow_unicode=True, width=100))
    for note in notes:
        print(f"igw convert: not carried: {note}", file=sys.stderr)
    return 0


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "convert",
        help="convert an InferenceGatewayConfig between the managed add-on's shape and ours",
        description="Print FILE (an InferenceGatewayConfig, or an environment file) in the "
        "other shape as YAML: the managed add-on's (inference.sagemaker.aws.amazon.com) or "
        "this project's (inference.igw.dev). Fields the target cannot carry are named on "
        "stderr and kept in the annotation igw.dev/native; a field this project cannot "
        "honour exits 2 with its path.",
    )
    parser.add_argument("file", type=Path, metavar="FILE")
    parser.add_argument(
        "--to",
        choices=["native", "managed"],
        help="the target shape (default: the other one than FILE's)",
    )
    parser.set_defaults(handler=_run)
