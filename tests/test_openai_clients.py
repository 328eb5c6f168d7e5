"""`openai_clients` closes every `openai.AsyncOpenAI` a test makes when that test ends.

A small suite run as `make test` runs the real one, with a conftest that takes the
fixture as the e2e and emulator conftests do: its first test makes a client (through a
helper, as tests do) and keeps it; the second finds it closed. Without the fixture the
client stays open until it is collected, and then closes itself on whatever loop runs
(see `openai_clients`).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).parent
CONFTEST = "from openai_clients import openai_clients_closed  # noqa: F401\n"
SUITE = """
import openai

made = []


def client():
    return openai.AsyncOpenAI(base_url="http://127.0.0.1:9/v1", api_key="k", max_retries=0)


async def test_makes_a_client():
    made.append(client())
    assert not made[0].is_closed()


def test_the_client_was_closed_when_that_test_ended():
    assert made[0].is_closed()
"""


def test_a_client_a_test_made_is_closed_when_the_test_ends(tmp_path: Path) -> None:
    (tmp_path / "pytest.ini").write_text(
        "[pytest]\naddopts = -p no:cacheprovider\nasyncio_mode = auto\n"
        "asyncio_default_fixture_loop_scope = function\n"
    )
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_suite.py").write_text(SUITE)
    env = {**os.environ, "PYTHONPATH": str(TESTS)}
    env.pop("PYTEST_XDIST_WORKER", None)
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "test_suite.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    assert "2 passed" in run.stdout
