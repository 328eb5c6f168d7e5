"""Every `openai.AsyncOpenAI` a test makes is closed when the test ends, on its own loop.

An unclosed client closes itself when it is collected, by scheduling `aclose()` on
whatever loop is running then (`openai._base_client.AsyncHttpxClientWrapper.__del__`).
Collected during a later test on the same worker, that task fails on its own closed loop
and reaches the later test's exception handler: `test_http2_fuzz.py` failed so once
`make test` grouped files per worker. Tests make clients where it reads best (a helper a
request, a client a key), so rather than ask each to close its own, the conftests of the
folders whose tests use the SDK take this fixture: it records each client made while a
test runs and closes it at the test's teardown.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import openai
import pytest

__all__ = ["openai_clients_closed"]


@pytest.fixture(autouse=True)
async def openai_clients_closed(
    monkeypatch: pytest.MonkeyPatch,
) -> AsyncIterator[list[openai.AsyncOpenAI]]:
    made: list[openai.AsyncOpenAI] = []
    init = openai.AsyncOpenAI.__init__

    def recorded(self: openai.AsyncOpenAI, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        made.append(self)

    monkeypatch.setattr(openai.AsyncOpenAI, "__init__", recorded)
    yield made
    for client in made:
        await client.close()
