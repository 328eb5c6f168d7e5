"""Where the precise prefix scorer gets a model's tokenizer: loaded once the files exist.

In a cluster the picker's tokenizer files arrive beside it, not inside its image: a
sidecar of the picker pod copies them from the model's own source (cdk8s/charts/
picker.py, `igw tokenizer fetch`), and the picker must serve from its first second
whether or not they are there yet (the picker is the gateway's critical path; a hub
outage must never keep it from starting). So a tokenizer named by a directory is:

* loaded at once when `tokenizer.json` is there (a file that does not load is a
  `ValueError`: the config is wrong, say so at validation);
* otherwise *pending*: `get()` answers None (the scorer uses its approximate index for
  that model, as for a pod without events) and looks again at most every `poll_s`; when
  the files appear they are loaded on a thread (a real `tokenizer.json` takes a few
  hundred milliseconds to parse, too long for the event loop) and used from the next
  request on. A pending or failed load is logged once per state, and `ready` says which
(the picker's `igw_kv_tokenizer_ready`).

`emulator` is the emulator's tokenization rule (ready at once); `none` hashes nothing.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

from inference_gateway.protocols.vllm.hf_tokenizer import HFTokenizer
from inference_gateway.protocols.vllm.prompt_tokens import EmulatorTokenizer, PromptTokenizer

__all__ = ["EMULATOR", "NONE", "TokenizerSource"]

log = logging.getLogger(__name__)

EMULATOR = "emulator"
NONE = "none"
POLL_S = 10.0


class TokenizerSource:
    def __init__(
        self, spec: str, *, poll_s: float = POLL_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.spec = spec
        self.poll_s = poll_s
        self.clock = clock
        self._tokenizer: PromptTokenizer | None = None
        self._next_look = float("-inf")
        self._loading = False
        self.error: str | None = None
        if spec == EMULATOR:
            self._tokenizer = EmulatorTokenizer()
        elif spec != NONE and (Path(spec) / "tokenizer.json").is_file():
            self._tokenizer = HFTokenizer(spec)  # a broken file: ValueError, at validation
        elif spec != NONE:  # (`igw_kv_tokenizer_ready` 0 says so on /metrics too)
            log.info(
                "precise prefix scorer: no tokenizer files at %s yet; prefix scoring for its "
                "models uses the approximate index until they arrive",
                spec,
            )

    @property
    def ready(self) -> bool:
        return self._tokenizer is not None

    def get(self) -> PromptTokenizer | None:
        """The tokenizer, or None while its files are missing (see the docstring)."""
        tokenizer = self._tokenizer
        if tokenizer is not None or self.spec == NONE:
            return tokenizer
        now = self.clock()
        if now >= self._next_look and not self._loading:
            self._next_look = now + self.poll_s
            if (Path(self.spec) / "tokenizer.json").is_file():
                self._loading = True
                threading.Thread(target=self._load, name="tokenizer-load", daemon=True).start()
        return None

    def _load(self) -> None:
        try:
            self._tokenizer = HFTokenizer(self.spec)
            log.info("precise prefix scorer: tokenizer loaded from %s", self.spec)
            self.error = None
        except (ValueError, ModuleNotFoundError) as error:  # no `tokenizers` in a slim venv
            if str(error) != self.error:
                log.error("precise prefix scorer: %s (retrying every %.0f s)", error, self.poll_s)
            self.error = str(error)
        finally:
            self._loading = False
