"""Outbound HTTP/1.1 to model servers: a lean keep-alive client, one idle pool per pod.

The proxy forwards one POST per request and relays the answer (and the endpoint store
GETs each pod's metrics every 50 ms), so this client does only that: it writes the
request line, headers and body in one `transport.write` from the caller's own task and
hands the body over as it arrives, chunk by chunk for SSE. No cookies, redirects,
proxies, TLS, compression or tracing: what aiohttp's general client spends most of its
per-request time on, and what a pod on the pod network never needs.

Answers are parsed by llhttp (through `httptools`, the parser uvicorn and Node.js use),
strict by default: chunk sizes are bare hex (no `0x`, `+` or `_`), `chunked` is matched
as a Transfer-Encoding token, Transfer-Encoding with Content-Length or two different
Content-Lengths are errors (RFC 9112 §6.1-6.3: a smuggling or splitting attempt; the
connection is closed), and bare LF line ends are refused. A body read until the
connection closes ends only on a clean close (FIN): a reset or error is an error, never a
silently short body. `read()` of a whole body is capped (`max_body_bytes`).

    UpstreamError                   every failure, translated here in one place; a plain
    │                               one is a malformed or truncated answer
    ├── UpstreamConnectError        the request never reached the engine: connect failed
    │                               (refused, unreachable, timed out) or the connection
    │                               closed before any byte of an answer; safe to retry
    │                               on another pod
    └── UpstreamTimeout             no byte for `read_timeout_s` while one was awaited
                                    (the engine may be working: answer 504, do not retry)

Every error before `PendingResponse.response()` returns leaves the client untouched, so
the proxy may try another pod. A connection reused from the pool that closes before
answering is retried once on a fresh connection to the same pod (the pod closed an idle
connection as we picked it up, so it never saw the request).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections import deque
from collections.abc import AsyncIterator, Mapping

import httptools

from inference_gateway.errors import UpstreamConnectError, UpstreamError, UpstreamTimeout

__all__ = [
    "PendingResponse",
    "Upstream",
    "UpstreamConnectError",
    "UpstreamError",
    "UpstreamResponse",
    "UpstreamTimeout",
]


MAX_HEAD_BYTES = 64 * 1024  # status line and headers
HIGH_WATER = 256 * 1024  # buffered body bytes before reading from the pod pauses
MAX_BODY_BYTES = 64 * 1024 * 1024  # a body read whole (`read()`), unless told otherwise
MAX_TEXT_BYTES = 8 * 1024 * 1024  # a GET read as text (a metrics page, a model list)

# connection states
_IDLE, _HEAD, _BODY, _DONE, _FAILED = range(5)


class _AfterAnswer(Exception):
    """Stops the parser at bytes that follow a complete answer (never reused then)."""


class UpstreamResponse:
    """A model server's answer: `status`, `headers` (lower-case names) and the body,
    read whole (`read`) or as it arrives (`chunks`). `release()` when done: the
    connection goes back to the pool only if the body was read to its end."""

    __slots__ = (
        "_conn",
        "_eof",
        "_error",
        "_limit",
        "_pieces",
        "_size",
        "_whole",
        "headers",
        "status",
    )

    def __init__(self, conn: _Connection, status: int, headers: dict[str, str]) -> None:
        self._conn: _Connection | None = conn
        self.status = status
        self.headers = headers
        self._pieces: deque[bytes] = deque()
        self._size = 0
        self._eof = False
        self._error: UpstreamError | None = None
        self._whole = False  # read() holds the whole body anyway: never pause for it
        self._limit = 0

    async def read(self, limit: int | None = None) -> bytes:
        """The whole body; more than `limit` bytes (default: the client's
        `max_body_bytes`) is an `UpstreamError` and closes the connection."""
        conn = self._connection()
        self._whole = True
        self._limit = conn.upstream.max_body_bytes if limit is None else limit
        if self._size > self._limit and self._error is None:
            conn.fail_and_close(_too_large(self._limit))
        while not self._eof and self._error is None:
            conn = self._connection()
            conn.resume()
            await conn.wait()
        if self._error is not None:
            raise self._error
        body = b"".join(self._pieces) if len(self._pieces) != 1 else self._pieces[0]
        self._pieces.clear()
        self._size = 0
        return body

    async def chunks(self) -> AsyncIterator[bytes]:
        """The body in the pieces it arrives in (decoded from chunked framing), unbuffered."""
        while True:
            if self._pieces:
                piece = b"".join(self._pieces) if len(self._pieces) > 1 else self._pieces[0]
                self._pieces.clear()
                self._size = 0
                self._connection().resume()
                yield piece
            elif self._error is not None:
                raise self._error
            elif self._eof:
                return
            else:
                await self._connection().wait()

    def release(self) -> None:
        """Give the connection back (reusable only after a complete body); idempotent."""
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.finish(reusable=self._eof and self._error is None)

    def _connection(self) -> _Connection:
        if self._conn is None:
            raise UpstreamError("the response was released")
        return self._conn


def _too_large(limit: int) -> UpstreamError:
    return UpstreamError(f"the model server's answer is over {limit} bytes")


class _Connection(asyncio.Protocol):
    """One keep-alive connection and llhttp's parse of the answer in progress on it.

    The parser calls back `on_headers_complete`, `on_body` and `on_message_complete`
    (httptools' callback names) from inside `data_received`."""

    def __init__(self, upstream: Upstream, key: tuple[str, int]) -> None:
        self.upstream = upstream
        self.key = key
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.clean_eof = False  # the pod ended its side with FIN, not a reset
        self.idle_since = 0.0
        self.keep_alive = True
        self.state = _IDLE
        # one parser for the connection's life: it is reused only after an answer llhttp
        # read to its end (`finish`), where llhttp expects the next one; a parser a
        # request (with its bound callbacks) was six objects more for every young
        # collection to walk
        self.parser = httptools.HttpResponseParser(self)
        self.head_bytes = 0
        self.headers: dict[str, str] = {}
        self.informational = False
        self.until_close = False
        self.response: UpstreamResponse | None = None
        self.failure: UpstreamError | None = None
        self.waiter: asyncio.Future[None] | None = None
        self.paused = False
        self.got_bytes = False

    # ------------------------------------------------------------------ asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):  # not TCP (a test's Unix socket)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        upstream = self.upstream
        if not upstream.account_cpu:
            self._received(data)
            return
        started = time.perf_counter()
        try:
            self._received(data)
        finally:
            upstream.busy_s += time.perf_counter() - started

    def _received(self, data: bytes) -> None:
        state = self.state
        if state == _IDLE:  # bytes nobody asked for: the connection is unusable
            self.close()
            return
        if state in (_DONE, _FAILED):
            self.keep_alive = False
            return
        self.got_bytes = True
        if state == _HEAD:
            self.head_bytes += len(data)
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserCallbackError as error:
            cause = error.__context__
            if isinstance(cause, _AfterAnswer):
                self.keep_alive = False
            else:
                failure = cause if isinstance(cause, UpstreamError) else UpstreamError(repr(cause))
                self.fail_and_close(failure)
        except httptools.HttpParserUpgrade:
            self.fail_and_close(UpstreamError("the model server switched protocols"))
        except httptools.HttpParserError as error:
            self.fail_and_close(UpstreamError(f"malformed answer from the model server: {error}"))
        if self.state == _HEAD and self.head_bytes > MAX_HEAD_BYTES:
            self.fail_and_close(UpstreamError("response headers too large"))
        self._wake()

    def eof_received(self) -> bool:
        self.clean_eof = True
        return False  # close the transport; connection_lost settles what is in progress

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        state = self.state
        if state == _BODY and self.until_close and self.clean_eof and exc is None:
            self._done()
        elif state not in (_IDLE, _DONE, _FAILED):
            self._fail(self._closed_error(exc))
        self._wake()
        self.upstream._forget(self)

    # ------------------------------------------------------------------ llhttp callbacks

    def on_message_begin(self) -> None:
        if self.state == _DONE:  # a second answer in the same bytes
            raise _AfterAnswer
        self.headers = {}

    def on_header(self, name: bytes, value: bytes) -> None:
        if self.state != _HEAD:  # a chunked body's trailers: the head is already out
            return
        key = name.decode("latin-1").lower()
        text = value.decode("latin-1").strip()
        headers = self.headers
        headers[key] = f"{headers[key]}, {text}" if key in headers else text

    def on_headers_complete(self) -> None:
        status = self.parser.get_status_code()
        self.informational = status < 200
        if self.informational:  # skip informational answers (103 Early Hints)
            return
        headers = self.headers
        parser = self.parser
        if not parser.should_keep_alive():
            self.keep_alive = False
        encoding = headers.get("transfer-encoding")
        if encoding is not None:  # llhttp: chunked only as the last coding, else until close
            self.until_close = encoding.rpartition(",")[2].strip().lower() != "chunked"
        else:
            self.until_close = "content-length" not in headers and status not in (204, 304)
        if self.until_close:
            self.keep_alive = False
        self.response = UpstreamResponse(self, status, headers)
        self.state = _BODY

    def on_body(self, body: bytes) -> None:
        response = self.response
        assert response is not None
        response._pieces.append(body)
        response._size += len(body)
        if response._whole:
            if response._size > response._limit:
                raise _too_large(response._limit)
        elif response._size > HIGH_WATER and not self.paused and self.transport is not None:
            self.paused = True
            self.transport.pause_reading()

    def on_message_complete(self) -> None:
        if self.informational:
            self.informational = False
            return
        self._done()

    # ------------------------------------------------------------------ the caller's side

    def send(self, head: bytes, body: bytes) -> None:
        assert self.transport is not None
        self.state = _HEAD
        self.head_bytes = 0
        self.until_close = False
        self.got_bytes = False
        self.response = None
        self.failure = None
        # the write wakes the pod: where it runs on this machine (a test, a bench) the
        # scheduler may run it before returning here, so this step is timed on the
        # thread's CPU clock, which that time does not move (see `Upstream.busy_s`)
        started = time.thread_time() if self.upstream.account_cpu else 0.0
        try:
            if len(body) < 16384:
                self.transport.write(head + body)
            else:
                self.transport.writelines((head, body))
        except (OSError, RuntimeError) as error:  # closed under us: nothing was sent
            self.fail_and_close(UpstreamConnectError(f"write failed: {error!r}"))
        if started:
            self.upstream.busy_s += time.thread_time() - started

    async def read_head(self) -> UpstreamResponse:
        while self.response is None:
            if self.failure is not None:
                raise self.failure
            await self.wait()
        return self.response

    async def wait(self) -> None:
        """Until the parser has news: bytes, the end, or a failure."""
        if self.closed:  # nothing more will come
            if self.state not in (_IDLE, _DONE, _FAILED):
                self._fail(self._closed_error(None))
            return
        waiter = self.waiter = self.loop.create_future()
        timer = self.loop.call_later(self.upstream.read_timeout_s, self._timed_out, waiter)
        try:
            await waiter
        finally:
            timer.cancel()
            self.waiter = None

    def resume(self) -> None:
        if self.paused and self.transport is not None:
            self.paused = False
            self.transport.resume_reading()

    def finish(self, *, reusable: bool) -> None:
        if reusable and self.keep_alive and not self.closed and self.state == _DONE:
            self.state = _IDLE
            self.response = None
            self.upstream._put(self)
        else:
            self.close()

    def fail_and_close(self, error: UpstreamError) -> None:
        self._fail(error)
        self.close()

    def close(self) -> None:
        self.keep_alive = False
        if self.transport is not None and not self.closed:
            self.closed = True
            self.transport.close()

    # ------------------------------------------------------------------ outcomes

    def _done(self) -> None:
        self.state = _DONE
        assert self.response is not None
        self.response._eof = True

    def _fail(self, error: UpstreamError) -> None:
        self.state = _FAILED
        self.keep_alive = False
        self.failure = error
        if self.response is not None:
            self.response._error = error

    def _closed_error(self, exc: Exception | None) -> UpstreamError:
        reason = f" ({exc!r})" if exc else ""
        if not self.got_bytes:
            return UpstreamConnectError(
                f"the model server closed the connection before answering{reason}",
                sent=True,  # written: called only once a request was sent
            )
        where = "in the headers" if self.response is None else "mid-body"
        return UpstreamError(f"the model server's answer was cut off {where}{reason}")

    def _wake(self) -> None:
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _timed_out(self, waiter: asyncio.Future[None]) -> None:
        if not waiter.done():
            waiter.set_exception(
                UpstreamTimeout(
                    f"no byte from the model server in {self.upstream.read_timeout_s:g} s",
                    before_response=not self.got_bytes,
                )
            )


class PendingResponse:
    """A request on its way: `await response()` once, or `abandon()` it."""

    __slots__ = ("_body", "_conn", "_head", "_key", "_upstream")

    def __init__(
        self,
        upstream: Upstream,
        key: tuple[str, int],
        head: bytes,
        body: bytes,
        conn: _Connection | None,
    ) -> None:
        self._upstream = upstream
        self._key = key
        self._head = head
        self._body = body
        self._conn = conn

    async def response(self) -> UpstreamResponse:
        conn, self._conn = self._conn, None
        if conn is not None:  # sent on a pooled connection
            try:
                return await conn.read_head()
            except UpstreamConnectError:
                # the pod closed this idle connection as we took it: once more, on a new one
                conn.close()
            except BaseException:
                conn.close()
                raise
        conn = await self._upstream._connect(self._key)
        try:
            conn.send(self._head, self._body)
            return await conn.read_head()
        except BaseException:
            conn.close()
            raise

    def abandon(self) -> None:
        """Never awaited after all: drop the connection it was sent on."""
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()


class Upstream:
    """Keep-alive HTTP/1.1 to model servers: the proxy's POSTs and the scrape's GETs."""

    def __init__(
        self,
        *,
        connect_timeout_s: float = 5.0,
        read_timeout_s: float = 300.0,
        idle_timeout_s: float = 4.0,
        max_idle_per_pod: int = 256,
        max_body_bytes: int = MAX_BODY_BYTES,
        account_cpu: bool = False,
    ) -> None:
        """`read_timeout_s` bounds each wait for bytes (the first byte included);
        `idle_timeout_s` stays under uvicorn's 5 s keep-alive default (vLLM's server), so
        a pod rarely closes a connection just as it is taken from the pool."""
        self.connect_timeout_s = connect_timeout_s
        self.read_timeout_s = read_timeout_s
        self.idle_timeout_s = idle_timeout_s
        self.max_idle_per_pod = max_idle_per_pod
        self.max_body_bytes = max_body_bytes
        # with `account_cpu` (a scrape client), the time spent writing requests and
        # parsing answers, timed where that runs: what the scrape loop charges to its CPU
        # budget (the process's CPU also holds the requests being proxied). Reading an
        # answer is one synchronous step, timed on the monotonic clock: its CPU time
        # unless the thread is preempted in it (a CPU-time clock is a system call, 0.5 us
        # here; six a scrape were 5 % of an idle picker's CPU at 1,024 pods). A write,
        # which wakes its reader, keeps the CPU-time clock
        self.account_cpu = account_cpu
        self.busy_s = 0.0
        self._idle: dict[tuple[str, int], list[_Connection]] = {}
        self._open: set[_Connection] = set()
        self._prefixes: dict[tuple[bytes, str, int, str], bytes] = {}

    def post(
        self, host: str, port: int, path: str, body: bytes, headers: Mapping[str, str]
    ) -> PendingResponse:
        """Send `body` at once when the pod has an idle connection (no await, so the
        caller's bookkeeping overlaps the pod's work), else on the first await of
        `PendingResponse.response()`, which returns once the status line and headers
        are in."""
        return self._send(b"POST", host, port, path, body, headers)

    def get(
        self, host: str, port: int, path: str, headers: Mapping[str, str] | None = None
    ) -> PendingResponse:
        """A GET (the metrics scrape), sent like `post`."""
        return self._send(b"GET", host, port, path, None, headers or {})

    async def get_text(
        self, host: str, port: int, path: str, *, limit: int = MAX_TEXT_BYTES
    ) -> str:
        """GET `path` and decode the body (the metrics scrape, the model list); an
        answer of 400 or more, or a body over `limit` bytes, is an `UpstreamError`."""
        response = await self.get(host, port, path).response()
        try:
            body = await response.read(limit)
        finally:
            response.release()
        if response.status >= 400:
            raise UpstreamError(f"GET {path} answered HTTP {response.status}")
        charset = response.headers.get("content-type", "").partition("charset=")[2]
        return body.decode(charset.strip().strip('"') or "utf-8", errors="replace")

    def _send(
        self,
        method: bytes,
        host: str,
        port: int,
        path: str,
        body: bytes | None,
        headers: Mapping[str, str],
    ) -> PendingResponse:
        key = (host, port)
        head = self._head(method, host, port, path, body, headers)
        payload = body or b""
        conn = self._take(key)
        if conn is not None:
            conn.send(head, payload)
        return PendingResponse(self, key, head, payload, conn)

    async def close(self) -> None:
        for conn in list(self._open):
            conn.close()
        self._idle.clear()
        self._open.clear()

    # ------------------------------------------------------------------ the pool

    def _take(self, key: tuple[str, int]) -> _Connection | None:
        """The most recently used idle connection (LIFO keeps the fewest warm)."""
        idle = self._idle.get(key)
        oldest_ok = time.monotonic() - self.idle_timeout_s
        while idle:
            conn = idle.pop()
            closing = conn.transport is None or conn.transport.is_closing()
            if not conn.closed and not closing and conn.idle_since >= oldest_ok:
                return conn
            conn.close()
        return None

    def _put(self, conn: _Connection) -> None:
        idle = self._idle.setdefault(conn.key, [])
        now = time.monotonic()
        if idle and idle[0].idle_since < now - self.idle_timeout_s:
            idle.pop(0).close()  # the bottom of the stack has idled out
        if len(idle) >= self.max_idle_per_pod:
            conn.close()
            return
        conn.idle_since = now
        idle.append(conn)

    def _forget(self, conn: _Connection) -> None:
        self._open.discard(conn)
        idle = self._idle.get(conn.key)
        if idle and conn in idle:
            idle.remove(conn)

    async def _connect(self, key: tuple[str, int]) -> _Connection:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                _, conn = await loop.create_connection(
                    lambda: _Connection(self, key), key[0], key[1]
                )
        except TimeoutError:
            raise UpstreamConnectError(
                f"connect to {key[0]}:{key[1]} timed out after {self.connect_timeout_s:g} s"
            ) from None
        except OSError as error:
            raise UpstreamConnectError(f"connect to {key[0]}:{key[1]} failed: {error}") from error
        self._open.add(conn)
        return conn

    def _head(
        self,
        method: bytes,
        host: str,
        port: int,
        path: str,
        body: bytes | None,
        headers: Mapping[str, str],
    ) -> bytes:
        """Request line and headers; the fixed part is built once per pod, method and path."""
        key = (method, host, port, path)
        prefix = self._prefixes.get(key)
        if prefix is None:
            if len(self._prefixes) > 4096:
                self._prefixes.clear()
            hostname = f"[{host}]" if ":" in host else host
            prefix = self._prefixes[key] = b"%s %s HTTP/1.1\r\nhost: %s:%d\r\n" % (
                method,
                path.encode(),
                hostname.encode(),
                port,
            )
        if not headers and body is None:  # a scrape's GET: the fixed part is all of it
            return prefix + b"\r\n"
        lines = []
        for name, value in headers.items():
            if "\n" in value or "\r" in value or "\n" in name or "\r" in name:
                raise ValueError(f"header {name!r} holds a CR or LF")
            lines.append(f"{name}: {value}\r\n")
        text = "".join(lines).encode("utf-8", "surrogateescape")
        if body is None:
            return b"%s%s\r\n" % (prefix, text)
        return b"%scontent-length: %d\r\n%s\r\n" % (prefix, len(body), text)
