"""The playground's bounds on what a client may hold (docs/en/playground.md, "Bounds and safe defaults", lists them),
and the Host check on every bound address against DNS rebinding, a foreign name for 127.0.0.1.

Design choices:
- What uvicorn lacks is added around it, not patched in: `BodyGuard` (ASGI) bounds bodies and drops a client that
  stops reading (it holds a slot); `guarded_protocol` (h11) bounds heads, answering past `max_connections` in JSON.
- With no generation slot free the answer is a JSON 503 at once: a queue would only hold connections open longer.
- The Host header is parsed as RFC 3986 writes it (`[v6]:port`): Starlette's TrustedHostMiddleware breaks IPv6."""

from __future__ import annotations

import asyncio
import ipaddress
import json
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

import anyio
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from common.errors import ConfigError
from playground.schemas import ApiError


def _error_body(message: str) -> bytes:
    return json.dumps({"error": message, "field": None}).encode()


async def send_json(send, status: int, message: str, extra_headers: tuple = ()) -> None:
    """Answer with the project's error shape and close the connection (the client may still be sending)."""
    body = _error_body(message)
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"connection", b"close"),
        *extra_headers,
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class _SlowReader(Exception):
    pass


class BodyGuard:
    def __init__(self, app, max_bytes: int, timeout: float, send_timeout: float = 30.0):
        self.app, self.max_bytes, self.timeout, self.send_timeout = app, max_bytes, timeout, send_timeout
        self.too_large = (
            f"the request body is larger than this server takes ({max_bytes} bytes; serve.py max_body_bytes=...)"
        )

    async def __call__(self, scope: dict, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and (not declared.strip().isdigit() or int(declared) > self.max_bytes):
            return await send_json(send, 413, self.too_large)
        try:
            with anyio.fail_after(self.timeout):
                body, disconnected = await self._read(receive)
        except TimeoutError:
            return await send_json(
                send, 408, f"the request body did not arrive within {self.timeout:g} s (serve.py body_timeout_s=...)"
            )
        if body is None:
            return await send_json(send, 413, self.too_large)
        if disconnected:
            return None
        replayed = False

        async def replay() -> dict:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # from here on: the disconnect, when the client goes

        async def guarded_send(message: dict) -> None:
            try:
                with anyio.fail_after(self.send_timeout):  # waits only while the client's buffers are full
                    await send(message)
            except TimeoutError:
                raise _SlowReader from None

        try:
            return await self.app(scope, replay, guarded_send)
        except _SlowReader:  # the app's sample stops (its slot is given back); uvicorn closes the connection
            return None

    async def _read(self, receive) -> tuple[bytes | None, bool]:
        """(the body, or None past `max_bytes`; whether the client went away)."""
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return b"", True
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                return None, False
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks), False


LINGER_S = 2.0  # after a closing answer, how long the rest of a client's request is read and dropped


class _LingeringTransport:
    """A transport whose close() first sends FIN and drops what the client still sends for LINGER_S: closing with
    unread input would send a TCP reset, and a client still uploading a refused body would lose our answer."""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop):
        self._transport, self._loop, self.lingering = transport, loop, False

    def __getattr__(self, name: str):
        return getattr(self._transport, name)

    def is_closing(self) -> bool:
        return self.lingering or self._transport.is_closing()

    def close(self) -> None:
        if self.lingering or self._transport.is_closing():
            return
        self.lingering = True
        try:
            self._transport.write_eof()
        except (OSError, NotImplementedError, RuntimeError):
            self._transport.close()
            return
        self._loop.call_later(LINGER_S, self._transport.close)


def guarded_protocol(header_timeout: float, max_connections: int) -> type[H11Protocol]:

    async def busy(scope: dict, receive, send) -> None:
        await send_json(
            send,
            503,
            f"the server has {max_connections} connections open, its limit "
            "(serve.py max_connections=...); try again shortly",
            ((b"retry-after", b"1"),),
        )

    class GuardedH11Protocol(H11Protocol):
        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(_LingeringTransport(transport, asyncio.get_running_loop()))
            self._head_timer: asyncio.TimerHandle | None = None
            if len(self.connections) > max_connections:
                self.app = busy
            self._arm()

        def data_received(self, data: bytes) -> None:
            if self.transport.lingering:  # answered and closing: the rest of the request is dropped
                return
            super().data_received(data)
            if self.cycle is not None and not self.cycle.response_complete:
                self._disarm()  # a whole request head arrived: the app (and BodyGuard) take it from here
            elif self._head_timer is None:
                self._arm()  # the first bytes of a new request: its head must be complete in time

        def send_400_response(self, msg: str) -> None:
            """Malformed HTTP (uvicorn answers it in bare text): the project's JSON shape instead."""
            if self.cycle is not None and self.cycle.response_started:
                return super().send_400_response(msg)
            body = _error_body(f"not a valid HTTP request ({msg.rstrip('.')})")
            self.transport.write(
                b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\n"
                b"content-length: %d\r\nconnection: close\r\n\r\n" % len(body) + body
            )
            self.transport.close()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _arm(self) -> None:
            self._disarm()
            self._head_timer = self.loop.call_later(header_timeout, self._too_slow)

        def _disarm(self) -> None:
            if getattr(self, "_head_timer", None) is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _too_slow(self) -> None:
            self._head_timer = None
            if self.cycle is None or self.cycle.response_complete:
                self.transport.close()

    return GuardedH11Protocol


def server_config(app, header_timeout_s: float, keep_alive_s: float, max_connections: int) -> uvicorn.Config:
    """The guarded protocol, no WebSocket (the page has none), errors only logged (so no client fills the log)."""
    return uvicorn.Config(
        app,
        http=guarded_protocol(header_timeout_s, max_connections),
        ws="none",
        timeout_keep_alive=keep_alive_s,
        log_level="error",
        access_log=False,
        lifespan="off",
        timeout_graceful_shutdown=3,
    )


class GenerationSlots:
    """At most `total` generations in progress, and `per_run` on one run. Used on the event loop only."""

    def __init__(self, total: int, per_run: int):
        self.total, self.per_run = total, per_run
        self.busy: Counter[str] = Counter()

    @contextmanager
    def take(self, run: str) -> Iterator[None]:
        """A slot for `run`, held until the block ends; ApiError 503 when none is free."""
        if sum(self.busy.values()) >= self.total:
            raise ApiError(
                503,
                None,
                f"the server is busy: {self.total} generations in progress, its limit "
                "(serve.py max_generations=...); try again shortly",
            )
        if self.busy[run] >= self.per_run:
            raise ApiError(
                503,
                "run",
                f"run {run!r} is busy: {self.per_run} generations in progress on it, the "
                "limit (serve.py max_generations_per_run=...); try again shortly",
            )
        self.busy[run] += 1
        try:
            yield
        finally:
            self.busy[run] -= 1
            if self.busy[run] <= 0:
                del self.busy[run]


LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
ANY = "*"


def normalized(name: str) -> str:
    """A host name or address as compared: lower-case, no brackets, no trailing dot, IPv6 compressed."""
    name = name.strip().lower().rstrip(".")
    if name.startswith("[") and name.endswith("]"):
        name = name[1:-1]
    try:
        return str(ipaddress.ip_address(name))
    except ValueError:
        return name


def is_loopback(host: str) -> bool:
    name = normalized(host)
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return name == "localhost"


def allowed_host_names(bind_host: str, allowed_hosts: list[str]) -> frozenset[str] | None:
    """The Host names a bind to `bind_host` answers (None: any, for '*'); a network bind without names: ConfigError."""
    if ANY in allowed_hosts:
        return None
    if not is_loopback(bind_host) and not allowed_hosts:
        raise ConfigError(
            f"host={bind_host} lets other machines connect, so the Host names they will use must be "
            "listed: e.g. python serve.py host=0.0.0.0 'allowed_hosts=[mybox.lan,192.168.1.20]' "
            "(or 'allowed_hosts=[*]' to answer any name, which allows DNS rebinding)"
        )
    names = set(LOOPBACK_NAMES) | {normalized(h) for h in allowed_hosts}
    if normalized(bind_host) not in ("0.0.0.0", "::", ""):  # one address, not all of them
        names.add(normalized(bind_host))
    return frozenset(names)


def host_of(header: bytes) -> str | None:
    """The name in a Host header value (`name`, `name:port`, `[v6]`, `[v6]:port`), or None if malformed."""
    try:
        value = header.decode("ascii").strip()
    except UnicodeDecodeError:
        return None
    if value.startswith("["):
        end = value.find("]")
        rest = value[end + 1 :]
        if end < 0 or (rest and not (rest.startswith(":") and (rest[1:].isdigit() or rest == ":"))):
            return None
        return normalized(value[: end + 1])
    name, _, port = value.partition(":")
    if (port and not port.isdigit()) or ":" in port or not name:
        return None
    return normalized(name)


class HostGuard:
    """ASGI middleware: requests whose Host is not in `names` get a JSON 400 (and the connection closes)."""

    def __init__(self, app, names: frozenset[str]):
        self.app, self.names = app, names

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] not in ("http", "websocket"):
            return await self.app(scope, receive, send)
        headers = [v for k, v in scope.get("headers") or [] if k == b"host"]
        name = host_of(headers[0]) if len(headers) == 1 else None
        if name is not None and name in self.names:
            return await self.app(scope, receive, send)
        if scope["type"] == "websocket":
            return await send({"type": "websocket.close", "code": 1008})
        shown = headers[0].decode("latin-1")[:100] if headers else "(none)"
        await send_json(
            send,
            400,
            f"this server does not answer for Host {shown!r} (it answers "
            f"{', '.join(sorted(self.names))}; serve.py allowed_hosts=... adds names)",
        )
