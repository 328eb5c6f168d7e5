"""The stand-in's `vllm serve` parser against vLLM v0.11.0's own.

The peer is vLLM's parser itself: `data/vllm_v0_11_0_parser_cases.json` holds command
lines and what vLLM v0.11.0's `vllm` parser (vllm/entrypoints/cli/main.py with
vllm/entrypoints/openai/cli_args.py make_arg_parser and vllm/engine/arg_utils.py, the
PyPI wheel) answered: the exit status, argparse's error line or the exception raised,
and every option whose value it changed. The rendered model-server pods of every
environment must parse, and a flag vLLM lacks must not.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from rendered_model_servers import RENDERED, RenderedVllm, container_params, vllm_containers

from inference_gateway.emulator.vllm_args import (
    option_default,
    option_table,
    parse_serve_args,
    serve_data,
    validate_serve_args,
)
from inference_gateway.emulator.vllm_pod import EMULATED

CASES = json.loads((Path(__file__).parent / "data" / "vllm_v0_11_0_parser_cases.json").read_text())


def _parse(argv: list[str]) -> Any:
    parsed = parse_serve_args(argv)
    if parsed.subcommand == "serve":
        validate_serve_args(parsed.options)
    return parsed


def _same_error(mine: str, theirs: str) -> bool:
    """argparse's line exactly; a pydantic error by its kind (its URL names the version)."""
    if "errors.pydantic.dev" in theirs:
        return mine.rsplit("/", 1)[-1] == theirs.rsplit("/", 1)[-1]
    return mine == theirs


@pytest.mark.parametrize("case", CASES["cases"], ids=lambda c: " ".join(c["argv"])[:60])
def test_parses_as_vllm_does(
    case: dict[str, Any],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name, text in case.get("files", {}).items():  # --config files, by relative path
        (tmp_path / name).write_text(text)
    monkeypatch.chdir(tmp_path)
    if case["exit"] == 1:
        kind, _, message = case["raises"].partition(": ")
        with pytest.raises(Exception) as raised:
            _parse(case["argv"])
        assert (type(raised.value).__name__, str(raised.value)) == (kind, message)
        return
    if case["exit"] != 0 or case["argv"] == ["-v"]:
        with pytest.raises(SystemExit) as exited:
            _parse(case["argv"])
        assert exited.value.code == case["exit"]
        if "error" in case:
            last = capsys.readouterr().err.strip().splitlines()[-1]
            assert _same_error(last, case["error"]), last
        return
    options = _parse(case["argv"]).options
    changed = {}
    for entry in option_table():
        value = getattr(options, entry["dest"])
        if value != option_default(entry):
            lora = entry["dest"] == "lora_modules"
            changed[entry["dest"]] = [list(v) for v in value] if lora else value
    theirs = case["changed"]
    for mapping in (changed, theirs):  # a fresh uuid4 per parse (KVTransferConfig)
        if "kv_transfer_config" in mapping:
            engine_id = mapping["kv_transfer_config"].pop("engine_id")
            assert re.fullmatch(r"[0-9a-f-]{36}", engine_id)
    # vLLM's non-JSON defaults (config objects) are not recorded: compare the rest
    assert {k: v for k, v in changed.items() if k in theirs or k not in _OBJECT_DEFAULTS} == theirs


#: options whose vLLM default is a config object (not recorded in the cases)
_OBJECT_DEFAULTS = {"compilation_config", "eplb_config", "structured_outputs_config"}


@pytest.mark.parametrize(
    "argv",
    [
        ["serve", "m", "--max-num-seq", "8", "--no-such-flag"],  # a typo of a real flag
        ["serve", "m", "--kv-offloading-size", "4"],  # a later vLLM's flag
        ["serve", "m", "--enable-prefix-caching=yes"],  # a switch takes no value
        ["serve", "m", "--block-size", "48"],  # not one of vLLM's choices
        ["serve", "m", "--kv-events-config", '{"hwm": "many"}'],  # KVEventsConfig.hwm: int
    ],
)
def test_what_vllm_lacks_or_refuses_exits_2(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        _parse(argv)
    assert exited.value.code == 2


@pytest.mark.parametrize("rendered", container_params())
def test_every_rendered_model_server_command_line_parses(rendered: RenderedVllm) -> None:
    container = rendered.container
    parsed = _parse(container["command"][1:] + container["args"])
    args = container["args"]
    assert parsed.subcommand == "serve"
    assert parsed.options.model_tag == args[0]
    assert parsed.options.port == int(args[args.index("--port") + 1])
    assert parsed.options.served_model_name == [args[args.index("--served-model-name") + 1]]


@pytest.mark.parametrize("rendered", container_params())
def test_the_rendered_image_is_the_transcribed_vllm(rendered: RenderedVllm) -> None:
    """The flags are vLLM v0.11.0's: a pod on another vLLM image needs its own
    transcription (vllm_serve_args.yaml) and recorded cases before the stand-in may
    speak for it."""
    reference = rendered.container["image"].split("@")[0]
    assert reference.rsplit(":", 1)[1] == "v" + serve_data()["version"]
    assert reference.rsplit(":", 1)[0].endswith("vllm/vllm-openai")


def test_the_rendered_trees_have_model_servers() -> None:
    assert {r.where.split("/")[0] for r in vllm_containers()} == {
        p.parents[1].name for p in RENDERED
    }


def test_the_data_says_which_options_the_emulator_reads() -> None:
    marked = {entry["dest"] for entry in option_table() if "emulated" in entry}
    assert marked == EMULATED
    assert len(option_table()) == 184  # vLLM v0.11.0 `vllm serve`, -h aside
