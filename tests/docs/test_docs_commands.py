"""Every documented command runs as written, or says why it cannot here (issue 37).

The pages are README.md, docs/*.md and any examples/**/*.md, found afresh each run, so a
page added later is covered as soon as it exists. docs/docs-that-run.md is the
convention (doc_commands.py implements it): a bash block runs here unless it is marked
`needs-aws`, `needs-cluster`, `needs-remote` or `tested-by=PATH`; every command of every
block, synopsis and inline code span is checked against what exists, marked or not. A
runnable block runs in a scratch folder that links the repository's files and in a
network namespace of its own (`unshare -rn`: the ports as written, no other test's), its
long commands through their cheap paths; nothing is skipped.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from .doc_commands import (
    LANGUAGES,
    MARKERS,
    NETNS,
    PRELUDE,
    PROGRAMS,
    REPO,
    Block,
    blocks,
    check_command,
    check_text,
    commands,
    inline_commands,
    pages,
    script_of,
)

PAGES = pages()
ALL_BLOCKS = [b for page in PAGES for b in blocks(page)]
RUNNABLE = [b for b in ALL_BLOCKS if b.runnable]


def _id(page: Path) -> str:
    return str(page.relative_to(REPO))


def test_the_pages_and_their_blocks_are_found() -> None:
    assert {_id(p) for p in PAGES} >= {"README.md", "docs/benchmarks.md", "docs/picker.md"}
    assert len(ALL_BLOCKS) > 40 and len(RUNNABLE) >= 3


@pytest.mark.parametrize("page", PAGES, ids=_id)
def test_every_block_says_what_it_is(page: Path) -> None:
    problems = []
    for block in blocks(page):
        if block.language not in LANGUAGES:
            problems.append(f"{block.where}: language {block.language!r}, one of {LANGUAGES}")
        unknown = block.markers - MARKERS
        if unknown:
            problems.append(f"{block.where}: unknown markers {sorted(unknown)}")
        if block.markers & {"synopsis", "output"} and block.language != "text":
            problems.append(f"{block.where}: synopsis and output mark text blocks")
        if block.tested_by is not None:
            test = REPO / block.tested_by
            if not test.is_file():
                problems.append(f"{block.where}: tested-by={block.tested_by}: no such test")
            elif _id(page) not in test.read_text():
                problems.append(f"{block.where}: {block.tested_by} never names {_id(page)}")
        if block.language == "text" and not block.markers & {"synopsis", "output"}:
            for line in block.body.splitlines():
                first = line.strip().split(" ", 1)[0]
                if first in (*PROGRAMS, "curl", "redis-server", "kubectl") and " --" in line:
                    problems.append(
                        f"{block.where}: {line.strip()!r} is a command in a text block: "
                        "tag it bash (it runs or says why not) or text synopsis"
                    )
    assert problems == []


@pytest.mark.parametrize("page", PAGES, ids=_id)
def test_every_documented_command_names_what_exists(page: Path) -> None:
    """Marked or not: the subcommands, flags, make targets, CDK context keys and output
    folders, modules, scripts and repository paths a command names all exist."""
    problems = []
    for block in blocks(page):
        if block.language == "bash" or "synopsis" in block.markers:
            problems += [f"{block.where}: {p}" for p in check_text(block.body)]
    for line, span in inline_commands(page):
        for words in commands(span):
            problems += [f"{_id(page)}:{line}: `{span}`: {p}" for p in check_command(words)]
    assert problems == []


@pytest.mark.parametrize(
    ("command", "problem"),
    [
        ("npx cdk deploy --all -c env=<env>", "cdk -c env=…: the app reads -c environment"),
        ("cdk deploy --all -c environment=prod", "needs -o cdk.out/prod"),
        ("igw preflight prod", "igw preflight: no such command"),
        ("igw serve --endpoints e.yaml --metrics-port 9", "igw serve --metrics-port: no such"),
        ("make deploy ENV=prod", "make deploy: no such target"),
        ("python -m stacks.preflights dev", "python -m stacks.preflights: no such module"),
        ("igw validate examples/fleet/nope.yaml", "examples/fleet/nope.yaml: no such file"),
    ],
)
def test_the_checks_catch_what_a_newcomer_hit(command: str, problem: str) -> None:
    """The doc lines issue 37 found (`-c env=`, `igw preflight`) and their kin fail."""
    (words,) = commands(command)
    assert any(problem in p for p in check_command(words)), check_command(words)


def _scratch(tmp_path: Path) -> Path:
    """A folder whose entries link the repository's, so relative paths resolve and what
    a block writes stays here (a doc command never writes into the checkout)."""
    work = tmp_path / "repo"
    work.mkdir()
    for entry in REPO.iterdir():
        if entry.name not in (".git",):
            (work / entry.name).symlink_to(entry)
    return work


@pytest.mark.parametrize("block", RUNNABLE, ids=lambda b: b.where)
def test_runnable_blocks_run(block: Block, tmp_path: Path) -> None:
    work = _scratch(tmp_path)
    script = tmp_path / "block.sh"
    script.write_text(PRELUDE + "\n".join(script_of(block).lines) + "\n")
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
           "COLUMNS": "100", "PYTHONDONTWRITEBYTECODE": "1"}  # fmt: skip
    argv = ["unshare", "-rn", sys.executable, "-c", NETNS, str(script)]
    proc = subprocess.Popen(
        argv, cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, start_new_session=True,
    )  # fmt: skip
    try:
        out, _ = proc.communicate(timeout=240)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # whatever the block left running
        proc.wait()
    if out.startswith("unshare:"):
        pytest.fail(f"a network namespace is needed (util-linux's unshare -rn): {out[:300]}")
    assert proc.returncode == 0, (
        f"{block.where} failed:\n{block.body}\n--- output ---\n{out[-4000:]}"
    )


MEASURED = re.compile(r"[Mm]easured on (\d{4}-\d{2}-\d{2}) at commit `([0-9a-f]{7,40})`")


def _shallow() -> bool:
    out = subprocess.run(
        ["git", "rev-parse", "--is-shallow-repository"], cwd=REPO, capture_output=True, text=True
    )
    return out.stdout.strip() != "false"


@pytest.mark.parametrize("page", PAGES, ids=_id)
def test_measured_figures_carry_their_date_and_commit(page: Path) -> None:
    """A section headed "Measured…" quotes figures of one run: it says when and on which
    commit (`Measured on 2026-12-06 at commit `abc1234``), so a reader knows their age."""
    text = page.read_text()
    problems = []
    sections = re.split(r"^#+ ", text, flags=re.M)
    for section in sections[1:]:
        heading = section.splitlines()[0]
        if not heading.lower().startswith("measured"):
            continue
        stamp = MEASURED.search(section)
        if stamp is None:
            problems.append(f"{_id(page)}: '{heading}' has no 'measured on DATE at commit `SHA`'")
            continue
        if not _shallow():  # a shallow CI clone holds only its own commit
            known = subprocess.run(
                ["git", "cat-file", "-e", f"{stamp.group(2)}^{{commit}}"], cwd=REPO
            )
            if known.returncode != 0:
                problems.append(f"{_id(page)}: '{heading}': commit {stamp.group(2)} unknown")
    assert problems == []


def test_a_quoted_drain_line_is_what_the_servers_log() -> None:
    """docs quote `log_drained`'s line (transport/signals.py) as the servers write it;
    tests/gateway/transport hold the function to the same words."""
    pattern = re.compile(
        r"igw [\w-]+: drained in [\d.]+ s: waited for \d+ in flight, \d+ finished, "
        r"\d+ cut at the grace period"
    )
    quoted = [(p, s) for p in PAGES for _, s in inline_commands(p)] + [
        (p, m.group(1)) for p in PAGES for m in re.finditer(r"`([^`]*drained[^`]*)`", p.read_text())
    ]
    lines = [(p, s) for p, s in quoted if "drained in" in s or "drained:" in s]
    assert lines, "the drain line is no longer quoted: drop this test with it"
    assert [(str(p), s) for p, s in lines if not pattern.search(" ".join(s.split()))] == []


def test_the_default_ports_table_is_the_commands() -> None:
    from inference_gateway.transport.ports import DEFAULTS

    readme = (REPO / "README.md").read_text()
    section = readme.split("### Default ports", 1)[1].split("\n#", 1)[0]
    rows = re.findall(r"^\| `(igw [\w-]+) (--[\w-]+)` \| (\d+) \|", section, re.M)
    assert {(c, f): int(p) for c, f, p in rows} == DEFAULTS
