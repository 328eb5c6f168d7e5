"""aiohttp's client errors as the gateway's one outbound error tree.

`igw global` reaches cluster gateways through aiohttp; `igw serve` reaches pods through
its own HTTP/1.1 client (http1_client.py), which raises `UpstreamError` and its two
subclasses itself. This function is the only place aiohttp's vocabulary is read, so the
attempt plan (core/request/attempts.py `failure_of`) decides "never started, may be
retried" for both tiers from one tree:

    aiohttp error (or OSError / TimeoutError)        →  UpstreamError
    connect timed out (`ConnectionTimeoutError`)        UpstreamConnectError
    any other timeout (`SocketTimeoutError`, a read)    UpstreamTimeout
    connection refused, reset or closed before the      UpstreamConnectError
      status line (`answered` False)                    (`sent` unless the connect failed)
    anything else, or after the status line             UpstreamError (broken)
"""

from __future__ import annotations

import aiohttp

from inference_gateway.errors import UpstreamConnectError, UpstreamError, UpstreamTimeout

__all__ = ["OUTBOUND_ERRORS", "translate"]

#: What an aiohttp request or read can raise for a reason the peer or the network gave.
OUTBOUND_ERRORS = (aiohttp.ClientError, OSError, TimeoutError)


def translate(error: BaseException, *, answered: bool) -> UpstreamError:
    """`error` (one of `OUTBOUND_ERRORS`) in the outbound tree; `answered`: the status
    line had arrived (a failure from then on broke an answer that had begun)."""
    detail = str(error) or type(error).__name__
    if isinstance(error, aiohttp.ConnectionTimeoutError):
        return UpstreamConnectError(detail)
    if isinstance(error, TimeoutError):
        return UpstreamTimeout(detail, before_response=not answered)
    if not answered and isinstance(error, aiohttp.ClientConnectionError | OSError):
        # past the connect, the request may have been written: `sent`
        return UpstreamConnectError(
            detail, sent=not isinstance(error, aiohttp.ClientConnectorError)
        )
    return UpstreamError(detail)
