"""Outbound HTTP/1.1 to model servers: a lean keep-alive client, one idle pool per pod.

The proxy forwards one POST per request and relays the answer (and the endpoint store
GETs each pod's metrics every 50 ms), so this client does only that: it writes the
request line, headers and body in one `transport.write` from the caller's own task,
parses the status line and headers itself, and hands the body over as it arrives
(`Content-Length`, chunked, or until close), chunk by chunk for SSE. No cookies,
redirects, proxies, TLS, compression or tracing: what aiohttp's general client spends
most of its per-request time on, and what a pod on the pod network never needs.

    UpstreamError                   every failure, translated here in one place
    ├── UpstreamConnectError        the pod could not be reached (refused, connect timeout)
    └── UpstreamTimeout             no byte for `read_timeout_s` while waiting for one

Every error before `PendingResponse.response()` returns leaves the client untouched, so
the proxy may try another pod. `UpstreamError.before_response` is true when not a byte
of the answer had arrived: a connection reused from the pool that closes that way is
retried once on a fresh connection to the same pod (the pod closed an idle connection as
we picked it up, so it never saw the request).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections import deque
from collections.abc import AsyncIterator, Mapping

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
NO_BODY_STATUS = frozenset({204, 304})


class UpstreamError(Exception):
    """The model server could not be reached or its answer broke."""

    def __init__(self, message: str, *, before_response: bool = False) -> None:
        super().__init__(message)
        self.before_response = before_response


class UpstreamConnectError(UpstreamError):
    """The TCP connection to the model server failed (refused, unreachable, timed out)."""


class UpstreamTimeout(UpstreamError):
    """No byte arrived for `read_timeout_s` while one was awaited."""


# body framing
_LENGTH, _CHUNKED, _UNTIL_CLOSE = 0, 1, 2
# parser states
_IDLE, _HEAD, _BODY, _CHUNK_SIZE, _CHUNK_DATA, _CHUNK_CRLF, _TRAILERS, _DONE, _FAILED = range(9)


class UpstreamResponse:
    """A model server's answer: `status`, `headers` (lower-case names) and the body,
    read whole (`read`) or as it arrives (`chunks`). `release()` when done: the
    connection goes back to the pool only if the body was read to its end."""

    __slots__ = ("_conn", "_eof", "_error", "_pieces", "_size", "_whole", "headers", "status")

    def __init__(self, conn: _Connection, status: int, headers: dict[str, str]) -> None:
        self._conn: _Connection | None = conn
        self.status = status
        self.headers = headers
        self._pieces: deque[bytes] = deque()
        self._size = 0
        self._eof = False
        self._error: UpstreamError | None = None
        self._whole = False  # read() holds the whole body anyway: never pause for it

    async def read(self) -> bytes:
        """The whole body."""
        self._whole = True
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


class _Connection(asyncio.Protocol):
    """One keep-alive connection and the parser of the answer in progress on it."""

    def __init__(self, upstream: Upstream, key: tuple[str, int]) -> None:
        self.upstream = upstream
        self.key = key
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.idle_since = 0.0
        self.keep_alive = True
        self.state = _IDLE
        self.buffer = b""
        self.response: UpstreamResponse | None = None
        self.failure: UpstreamError | None = None
        self.waiter: asyncio.Future[None] | None = None
        self.framing = _LENGTH
        self.remaining = 0
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
        if self.state == _IDLE:  # bytes nobody asked for: the connection is unusable
            self.close()
            return
        if self.state in (_DONE, _FAILED):
            self.keep_alive = False
            return
        self.got_bytes = True
        try:
            self._parse(data)
        except UpstreamError as error:
            self._fail(error)
            self.close()
        self._wake()

    def eof_received(self) -> bool:
        return False  # close the transport; connection_lost settles what is in progress

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.state == _BODY and self.framing == _UNTIL_CLOSE:
            self._done()
        elif self.state not in (_IDLE, _DONE, _FAILED):
            self._fail(self._closed_error(exc))
        self._wake()
        self.upstream._forget(self)

    # ------------------------------------------------------------------ the caller's side

    def send(self, head: bytes, body: bytes) -> None:
        assert self.transport is not None
        self.state = _HEAD
        self.buffer = b""
        self.got_bytes = False
        self.response = None
        self.failure = None
        try:
            if len(body) < 16384:
                self.transport.write(head + body)
            else:
                self.transport.writelines((head, body))
        except (OSError, RuntimeError) as error:  # closed under us: nothing was sent
            self._fail(UpstreamError(f"write failed: {error!r}", before_response=True))
            self.close()

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

    def close(self) -> None:
        self.keep_alive = False
        if self.transport is not None and not self.closed:
            self.closed = True
            self.transport.close()

    # ------------------------------------------------------------------ parsing

    def _parse(self, data: bytes) -> None:
        if self.state == _HEAD:
            if self.buffer:
                data, self.buffer = self.buffer + data, b""
            while self.state == _HEAD:
                end = data.find(b"\r\n\r\n")
                if end < 0:
                    if len(data) > MAX_HEAD_BYTES:
                        raise UpstreamError("response headers too large")
                    self.buffer = data
                    return
                status, headers = _parse_head(data[:end])
                data = data[end + 4 :]
                if status >= 200:  # skip informational answers (103 Early Hints)
                    self._start_body(status, headers)
        if not data:
            return
        if self.state == _BODY:
            self._body(data)
        elif self.state >= _CHUNK_SIZE and self.state != _DONE:
            self._chunked(data)
        else:
            self.keep_alive = False  # bytes after the answer: never reuse

    def _start_body(self, status: int, headers: dict[str, str]) -> None:
        if "close" in headers.get("connection", "").lower():
            self.keep_alive = False
        if status in NO_BODY_STATUS:
            framing, remaining = _LENGTH, 0
        elif "chunked" in headers.get("transfer-encoding", "").lower():
            framing, remaining = _CHUNKED, 0
        elif "content-length" in headers:
            try:
                remaining = int(headers["content-length"])
            except ValueError:
                remaining = -1
            if remaining < 0:
                raise UpstreamError(f"bad Content-Length {headers['content-length']!r}")
            framing = _LENGTH
        else:
            framing, remaining = _UNTIL_CLOSE, 0
            self.keep_alive = False
        self.response = UpstreamResponse(self, status, headers)
        self.framing, self.remaining = framing, remaining
        if framing == _CHUNKED:
            self.state = _CHUNK_SIZE
        elif framing == _LENGTH and remaining == 0:
            self._done()
        else:
            self.state = _BODY

    def _body(self, data: bytes) -> None:
        if self.framing == _UNTIL_CLOSE:
            self._deliver(data)
        elif len(data) < self.remaining:
            self.remaining -= len(data)
            self._deliver(data)
        else:
            if len(data) > self.remaining:
                self.keep_alive = False  # bytes after the answer: never reuse
                data = data[: self.remaining]
            self.remaining = 0
            if data:
                self._deliver(data)
            self._done()

    def _chunked(self, data: bytes) -> None:
        if self.buffer:
            data, self.buffer = self.buffer + data, b""
        out: list[bytes] = []
        pos, size = 0, len(data)
        while pos < size:
            state = self.state
            if state == _CHUNK_DATA:
                take = min(self.remaining, size - pos)
                out.append(data[pos : pos + take])
                pos += take
                self.remaining -= take
                if self.remaining == 0:
                    self.state = _CHUNK_CRLF
                continue
            end = data.find(b"\r\n", pos)
            if end < 0:
                break
            line, pos = data[pos:end], end + 2
            if state == _CHUNK_CRLF:
                if line:
                    raise UpstreamError("bad chunked encoding: no CRLF after a chunk")
                self.state = _CHUNK_SIZE
            elif state == _CHUNK_SIZE:
                try:
                    self.remaining = int(line.split(b";", 1)[0], 16)
                except ValueError:
                    raise UpstreamError(f"bad chunk size {line[:40]!r}") from None
                self.state = _CHUNK_DATA if self.remaining else _TRAILERS
            elif not line:  # _TRAILERS: a blank line ends the body
                if pos < size:
                    self.keep_alive = False
                pos = size
                self._deliver_all(out)
                self._done()
                return
        if pos < size:
            if size - pos > MAX_HEAD_BYTES:
                raise UpstreamError("bad chunked encoding: line too long")
            self.buffer = data[pos:]
        self._deliver_all(out)

    def _deliver_all(self, pieces: list[bytes]) -> None:
        if len(pieces) == 1:
            self._deliver(pieces[0])
        elif pieces:
            self._deliver(b"".join(pieces))

    def _deliver(self, piece: bytes) -> None:
        response = self.response
        assert response is not None
        response._pieces.append(piece)
        response._size += len(piece)
        if (
            response._size > HIGH_WATER
            and not response._whole
            and not self.paused
            and self.transport is not None
        ):
            self.paused = True
            self.transport.pause_reading()

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
        before = not self.got_bytes
        where = "before answering" if before else "mid-answer"
        reason = f" ({exc!r})" if exc else ""
        return UpstreamError(
            f"the model server closed the connection {where}{reason}", before_response=before
        )

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


def _parse_head(head: bytes) -> tuple[int, dict[str, str]]:
    lines = head.split(b"\r\n")
    parts = lines[0].split(b" ", 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/1."):
        raise UpstreamError(f"not an HTTP/1.x answer: {lines[0][:80]!r}")
    try:
        status = int(parts[1])
    except ValueError:
        raise UpstreamError(f"bad status line {lines[0][:80]!r}") from None
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(b":")
        if not sep:
            raise UpstreamError(f"bad header line {line[:80]!r}")
        key = name.strip().lower().decode("latin-1")
        text = value.strip().decode("latin-1")
        headers[key] = f"{headers[key]}, {text}" if key in headers else text
    if parts[0] == b"HTTP/1.0" and "keep-alive" not in headers.get("connection", "").lower():
        headers["connection"] = "close"
    return status, headers


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
            except UpstreamError as error:
                conn.close()
                if isinstance(error, UpstreamTimeout) or not error.before_response:
                    raise
                # the pod closed this idle connection as we took it: once more, on a new one
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
    ) -> None:
        """`read_timeout_s` bounds each wait for bytes (the first byte included);
        `idle_timeout_s` stays under uvicorn's 5 s keep-alive default (vLLM's server), so
        a pod rarely closes a connection just as it is taken from the pool."""
        self.connect_timeout_s = connect_timeout_s
        self.read_timeout_s = read_timeout_s
        self.idle_timeout_s = idle_timeout_s
        self.max_idle_per_pod = max_idle_per_pod
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
                f"connect to {key[0]}:{key[1]} timed out after {self.connect_timeout_s:g} s",
                before_response=True,
            ) from None
        except OSError as error:
            raise UpstreamConnectError(
                f"connect to {key[0]}:{key[1]} failed: {error}", before_response=True
            ) from error
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
        lines = []
        for name, value in headers.items():
            if "\n" in value or "\r" in value or "\n" in name or "\r" in name:
                raise ValueError(f"header {name!r} holds a CR or LF")
            lines.append(f"{name}: {value}\r\n")
        text = "".join(lines).encode("utf-8", "surrogateescape")
        if body is None:
            return b"%s%s\r\n" % (prefix, text)
        return b"%scontent-length: %d\r\n%s\r\n" % (prefix, len(body), text)
