"""Reading the commands out of README.md and docs/*.md, checking what they name, and
running the ones that run here (docs/docs-that-run.md states the conventions).

A fenced block's info string is its language and then its markers:

    ```bash                      run by tests/docs/test_docs_commands.py, in a folder and
                                 a network namespace of its own (the ports as written)
    ```bash needs-aws            an AWS account and credentials: checked, not run
    ```bash needs-cluster        a Kubernetes cluster (kubectl, argocd, its services)
    ```bash needs-remote         a git repository with a remote to push to (a PR)
    ```bash tested-by=PATH       run by that test (it names this page), checked here
    ```text                      output, diagrams, layouts: not commands
    ```text synopsis             a command's syntax: its flags must exist

Every command line of every bash block, every synopsis and every inline code span that
starts with a command this repository ships (`igw`, `make`, `cdk`, `python -m`, …) is
checked against what exists: the igw subcommand and its flags (the real parser), the
make target, the CDK context keys and output folder the app accepts, the Python module
or script, the repository paths. A runnable block is run line by line, each long command
through its cheap path (`CHEAP_PATHS`), never skipped.
"""

from __future__ import annotations

import argparse
import glob
import importlib.util
import re
import shlex
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LANGUAGES = {"bash", "text", "yaml", "json", "python"}
MARKERS = {"needs-aws", "needs-cluster", "needs-remote", "synopsis", "output"}
NOT_RUN = {"needs-aws", "needs-cluster", "needs-remote"}
#: how a runnable block runs each long command (the page says so too)
CHEAP_PATHS = {
    "make TARGET": "make -n TARGET (the target exists and its recipe expands; nothing runs)",
    "bench/run.py ARGS": "bench/run.py ARGS --dry-run (what would run, from the real options)",
    "python -m pytest PATHS": "python -m pytest --collect-only -q PATHS",
    "igw SERVER …": "started for real in the background until it says it listens or is "
    "ready, stopped when the block ends",
}
SERVERS = {"serve", "picker", "bbr", "auth", "pd-sidecar", "emulate", "global"}
READY = re.compile(r"listening on|ext_proc on|ext_authz on|pod\(s\) ready|Ready to accept")
PROGRAMS = ("igw", "igw-preflight", "make", "npx", "cdk", "python", "python3", ".venv/bin/python")
REPO_DIRS = ("gitops", "examples", "docs", "bench", "cdk8s", "stacks", "tests", "gateway_src",
             "envspec", "requirements")  # fmt: skip
#: outputs a command writes (never a file to find): bench results, the CDK assembly
OUTPUTS = ("bench/results/", "cdk.out")


@dataclass
class Block:
    doc: Path
    line: int
    language: str
    markers: set[str]
    body: str
    tested_by: str | None = None

    @property
    def where(self) -> str:
        return f"{self.doc.relative_to(REPO)}:{self.line}"

    @property
    def runnable(self) -> bool:
        return self.language == "bash" and not (self.markers & NOT_RUN) and not self.tested_by


def pages() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")),
            *sorted((REPO / "examples").rglob("*.md"))]  # fmt: skip


FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```[ \t]*$", re.S | re.M)


def blocks(doc: Path) -> list[Block]:
    text = doc.read_text()
    out = []
    for match in FENCE.finditer(text):
        words = match.group(1).split()
        language = words[0] if words else ""
        markers = {w for w in words[1:] if not w.startswith("tested-by=")}
        tested = [w.split("=", 1)[1] for w in words[1:] if w.startswith("tested-by=")]
        line = text[: match.start()].count("\n") + 1
        out.append(Block(doc, line, language, markers, match.group(2), (tested or [None])[0]))
    return out


def inline_commands(doc: Path) -> list[tuple[int, str]]:
    """(line, span) of every inline code span outside fences that starts with a program."""
    text = FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), doc.read_text())
    found = []
    for match in re.finditer(r"`([^`\n]+)`", text):
        span = match.group(1).strip()
        words = span.split()
        # `igw picker: drained in …` is a log line, not a command
        if len(words) > 1 and words[0] in PROGRAMS and not words[1].endswith(":"):
            found.append((text[: match.start()].count("\n") + 1, span))
    return found


# ------------------------------------------------------------------------ shell text


def logical_lines(script: str) -> list[str]:
    """Lines with `\\` continuations joined; a heredoc stays with the line that opens it
    (its body is data, not commands)."""
    out: list[str] = []
    lines = script.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        while line.endswith("\\") and i + 1 < len(lines):
            i += 1
            line = line[:-1] + " " + lines[i].strip()
        heredoc = re.search(r"<<-?\s*'?\"?(\w+)'?\"?", line)
        if heredoc:
            end = heredoc.group(1)
            body = [line]
            while i + 1 < len(lines):
                i += 1
                body.append(lines[i])
                if lines[i].strip() == end:
                    break
            line = "\n".join(body)
        out.append(line)
        i += 1
    return out


def commands(line: str) -> list[list[str]]:
    """The simple commands of one logical line (split at `&&`, `||`, `;`, `|`), comments
    and a heredoc's body left out, `VAR=value` prefixes dropped."""
    first = line.split("\n", 1)[0]
    lexer = shlex.shlex(first, posix=True, punctuation_chars=";&|")
    lexer.whitespace_split = True
    lexer.commenters = "#"
    out: list[list[str]] = [[]]
    try:
        for token in lexer:
            if token in {"&&", "||", ";", "|", "&", ";;"}:
                out.append([])
            else:
                out[-1].append(token)
    except ValueError:  # an unbalanced quote: the line as words
        out = [first.split()]
    cleaned = []
    for words in out:
        while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", words[0]):
            words = words[1:]
        if words:
            cleaned.append(words)
    return cleaned


def _placeholder(token: str) -> bool:
    """`<env>`, `…`, `[--flag]`, `$VAR`, or a word in capitals (`TARGET`, `FILE.yaml`)."""
    marks = ("<", "…", "...", "[", "]", "$", "{", "*", "|")
    return any(m in token for m in marks) or bool(re.fullmatch(r"[A-Z][A-Z0-9_-]*(\.\w+)?", token))


# ------------------------------------------------------------------------ checks


@cache
def _igw_parser() -> argparse.ArgumentParser:
    from inference_gateway.cli.main import build_parser

    return build_parser()


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _check_igw(words: list[str]) -> list[str]:
    parser = _igw_parser()
    args = words[1:]
    if not args or args[0].startswith("-"):
        flags = {o for a in parser._actions for o in a.option_strings}
        return [f"igw {a}: no such option" for a in args if a.startswith("-") and a not in flags]
    subs = _subparsers(parser)
    if args[0] not in subs:
        return [f"igw {args[0]}: no such command (igw --help lists them)"]
    sub, rest = subs[args[0]], args[1:]
    nested = _subparsers(sub)
    if nested and rest and rest[0] in nested:
        sub, rest = nested[rest[0]], rest[1:]
    flags = {o for a in sub._actions for o in a.option_strings}
    problems = []
    for token in rest:
        flag = token.split("=", 1)[0]
        if flag.startswith("--") and not _placeholder(flag) and flag not in flags:
            problems.append(f"igw {args[0]} {flag}: no such flag")
    return problems


@cache
def make_targets() -> frozenset[str]:
    text = (REPO / "Makefile").read_text()
    targets = set(re.findall(r"^([A-Za-z0-9_.-]+)\s*:(?!=)", text, re.M))
    for phony in re.findall(r"^\.PHONY:(.*)$", text, re.M):
        targets |= set(phony.split())
    return frozenset(targets)


def _check_make(words: list[str]) -> list[str]:
    wanted = [
        w for w in words[1:] if not w.startswith("-") and "=" not in w and not _placeholder(w)
    ]
    return [f"make {w}: no such target" for w in wanted if w not in make_targets()]


def _check_cdk(words: list[str]) -> list[str]:
    from stacks.app_context import CONTEXT_KEYS, DEFAULT_ENVIRONMENT

    problems: list[str] = []
    context: dict[str, str] = {}
    output = None
    for i, word in enumerate(words):
        value = words[i + 1] if i + 1 < len(words) else ""
        if word in ("-c", "--context"):
            key, _, val = value.partition("=")
            context[key] = val
        elif word in ("-o", "--output"):
            output = value
    for key in context:
        if key not in CONTEXT_KEYS:
            problems.append(f"cdk -c {key}=…: the app reads -c environment=<name>")
    env = context.get("environment", DEFAULT_ENVIRONMENT)
    app_given = "--app" in words or "-a" in words
    if env != DEFAULT_ENVIRONMENT and not app_given and output != f"cdk.out/{env}":
        problems.append(f"cdk -c environment={env}: needs -o cdk.out/{env} (cdk.json: dev's)")
    return problems


def _check_python(words: list[str]) -> list[str]:
    args = [w for w in words[1:] if not w.startswith(("<", ">"))]  # redirections
    if "-m" in args:
        module = args[args.index("-m") + 1]
        if not _placeholder(module) and importlib.util.find_spec(module) is None:
            return [f"python -m {module}: no such module"]
        return []
    script = next((a for a in args if not a.startswith("-")), None)
    if script and not _placeholder(script) and not glob.glob(str(REPO / _as_glob(script))):
        return [f"python {script}: no such script"]
    return []


def _as_glob(path: str) -> str:
    """`bench/<name>.py`, `cdk.out/$ENV`, `…`: placeholders as `*`."""
    return re.sub(r"<[^>]*>|\$\w+|…|\.\.\.", "*", path)


def check_paths(words: list[str], made: set[str]) -> list[str]:
    """Repository paths a command names must exist (placeholders become globs)."""
    problems = []
    for word in words:
        path = word.split("=", 1)[-1]
        if not path.startswith(tuple(f"{d}/" for d in REPO_DIRS)) or path in made:
            continue
        if path.startswith(OUTPUTS):
            continue
        if not glob.glob(str(REPO / _as_glob(path))):
            problems.append(f"{path}: no such file in the repository")
    return problems


def check_command(words: list[str], made: set[str] | None = None) -> list[str]:
    """What is wrong with one simple command (empty: nothing)."""
    made = made or set()
    program = words[0]
    if program == "npx" and len(words) > 1 and words[1] == "cdk":
        words = words[1:]
        program = "cdk"
    problems = check_paths(words, made)
    if program == "igw":
        problems += _check_igw(words)
    elif program == "igw-preflight":
        problems += _check_python(["python", "-m", "stacks.preflight"])
    elif program == "make":
        problems += _check_make(words)
    elif program == "cdk":
        problems += _check_cdk(words)
    elif program in ("python", "python3", ".venv/bin/python"):
        problems += _check_python(words)
    return problems


def check_text(script: str) -> list[str]:
    """Every command of a block: what it names exists. Files a block writes (`>`,
    `--write-endpoints`, `--html`, …) count as existing for the lines after."""
    problems = []
    made: set[str] = set()
    for line in logical_lines(script):
        for words in commands(line):
            problems += check_command(words, made)
            made |= {words[i + 1] for i, w in enumerate(words[:-1]) if w.startswith(">")}
            made |= {w for w in words if w.endswith((".yaml", ".json", ".html"))}
    return problems


# ------------------------------------------------------------------------ running


@dataclass
class Script:
    """A runnable block as the bash script the test runs."""

    lines: list[str] = field(default_factory=list)
    servers: int = 0


def cheap(words: list[str], line: str) -> str:
    """The line as the test runs it (`CHEAP_PATHS`)."""
    program = words[0]
    if program == "make":
        return line.replace("make ", "make -n ", 1)
    if any(w.endswith("bench/run.py") for w in words):  # the words: its comment left out
        return " ".join(shlex.quote(w) for w in [*words, "--dry-run"])
    if "pytest" in words and "-m" in words:
        return line.replace("-m pytest", "-m pytest --collect-only -q", 1)
    return line


def script_of(block: Block) -> Script:
    """Each logical line: as written, through its cheap path, or (a server) started in
    the background and waited for."""
    out = Script()
    for line in logical_lines(block.body):
        words = [w for c in commands(line) for w in c]
        if not words:
            continue
        server = (words[0] == "igw" and len(words) > 1 and words[1] in SERVERS
                  and not (words[1] == "global" and len(words) > 2 and not words[2].startswith("-"))
                  ) or words[0] == "redis-server"  # fmt: skip
        if server:
            out.servers += 1
            log = f".server-{out.servers}.log"
            out.lines.append(f"{line} > {log} 2>&1 &")
            out.lines.append(f"ready {log} $!")
        else:
            out.lines.append(cheap(words, line))
    return out


PRELUDE = r"""
set -eo pipefail
ready() {{  # LOG PID: until the server says it listens, at most 60 s; else its log
  for _ in $(seq 600); do
    if grep -Eq '{}' "$1"; then return 0; fi
    if ! kill -0 "$2" 2>/dev/null; then echo "server exited:"; cat "$1"; return 1; fi
    sleep 0.1
  done
  echo "server not ready in 60 s:"; cat "$1"; return 1
}}
trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true' EXIT
""".format(READY.pattern.replace("'", ""))

#: run in the new network namespace: bring loopback up (a new namespace's is down), then
#: the block's script; no `ip` binary needed
NETNS = """
import fcntl, os, socket, struct, sys
with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
    flags = struct.unpack("16sH", fcntl.ioctl(s, 0x8913, struct.pack("16sH", b"lo", 0)))[1]
    fcntl.ioctl(s, 0x8914, struct.pack("16sH", b"lo", flags | 1))
os.execvp("bash", ["bash", sys.argv[1]])
"""
