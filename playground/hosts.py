"""The Host check on every bound address against DNS rebinding, a foreign name for 127.0.0.1 (docs/en/playground.md).

Design choices:
- The Host header is parsed as RFC 3986 writes it (`[v6]:port`): Starlette's TrustedHostMiddleware breaks IPv6."""

from __future__ import annotations

import ipaddress

from common.errors import ConfigError
from playground.guard import send_json

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
