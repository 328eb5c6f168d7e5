"""The flags every HTTP server shares (`cli/process.py`): one definition, one check, the
same defaults (transport/defaults.py) for `igw serve`, `igw global`, `igw pd-sidecar` and
`igw bbr`; a duration that is not positive stops the command at parse time (exit 2)."""

from __future__ import annotations

import pytest

from inference_gateway.cli.main import build_parser
from inference_gateway.transport.defaults import BODY_TIMEOUT_S, DRAIN_GRACE_S, HEADER_TIMEOUT_S

BASE = {
    "serve": ["serve", "--endpoints", "e.yaml"],
    "global": ["global", "--config", "g.yaml"],
    "pd-sidecar": ["pd-sidecar", "--allow-prefill", "10.0.0.0/8"],
    "bbr": ["bbr"],
}


@pytest.mark.parametrize("command", list(BASE))
def test_every_server_drains_for_the_shared_default(command: str) -> None:
    args = build_parser().parse_args(BASE[command])
    assert args.drain_grace == DRAIN_GRACE_S


@pytest.mark.parametrize("command", ["serve", "global"])
def test_the_slow_client_defaults_are_the_transports(command: str) -> None:
    args = build_parser().parse_args(BASE[command])
    assert (args.header_timeout, args.body_timeout) == (HEADER_TIMEOUT_S, BODY_TIMEOUT_S)


@pytest.mark.parametrize(
    ("command", "flag"),
    [
        ("serve", "--header-timeout"),
        ("serve", "--body-timeout"),
        ("serve", "--prefill-timeout"),
        ("global", "--drain-grace"),
        ("pd-sidecar", "--prefill-timeout"),
        ("bbr", "--drain-grace"),
    ],
)
@pytest.mark.parametrize("value", ["0", "-1", "nan", "soon"])
def test_a_duration_that_is_not_positive_exits_2_naming_the_flag(
    command: str, flag: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stopped:
        build_parser().parse_args([*BASE[command], flag, value])
    assert stopped.value.code == 2
    assert f"argument {flag}" in capsys.readouterr().err
