"""Redis Sentinel endpoints: ``redis+sentinel://[user:password@]host1:port1,host2:port2/SERVICE[/DB]``
(``rediss+sentinel://`` for TLS to the sentinels and the data nodes alike).

The sentinels are asked which server is the primary of ``SERVICE`` each time a connection
to it is made, so a client follows a failover by connecting again: its pool's idle
connections, its script lanes and its subscriptions all reconnect through the sentinels
once the old primary is gone. A primary the sentinels demote while it runs has its
clients' connections closed by them (``CLIENT KILL``) as it is made a replica; one that
answers ``READONLY`` all the same is left as on a plain endpoint (the runner's
``READONLY`` path, :mod:`flo_redis._wire.runner`). The user and password in the URL
are the data nodes'; sentinels with their own ``requirepass`` or ACL user take
``sentinel_password=`` / ``sentinel_username=`` in the query. The ``ssl_*`` query options
of a ``rediss://`` URL apply to both kinds of connection. A sentinel named without a port
is on 26379.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit

import redis
import redis.exceptions as rex
import redis.sentinel as sync_sentinel
from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio import sentinel as async_sentinel
from redis.asyncio.connection import AbstractConnection
from redis.connection import AbstractConnection as SyncAbstractConnection
from redis.connection import parse_url

from flo_redis.errors import ConnectionFailedError, InvalidEndpointError

SENTINEL_SCHEMES = ("redis+sentinel", "rediss+sentinel")
DEFAULT_SENTINEL_PORT = 26379
# Query arguments meant for the sentinels, not the data nodes.
_SENTINEL_ARGUMENTS = ("sentinel_password", "sentinel_username")


@dataclass(frozen=True)
class SentinelEndpoint:
    """A parsed ``redis+sentinel://`` URL: where the sentinels are, the service they
    watch, and the settings of each kind of connection."""

    sentinels: tuple[tuple[str, int], ...]
    service: str
    tls: bool
    # The data nodes' connection settings (user, password, database, ssl_* ...).
    options: dict[str, Any] = field(default_factory=dict)
    # The sentinels' own credentials, when they have any.
    sentinel_auth: dict[str, str] = field(default_factory=dict)

    @property
    def addresses(self) -> str:
        return ",".join(f"{host}:{port}" for host, port in self.sentinels)

    def sentinel_settings(self, socket_settings: dict[str, Any]) -> dict[str, Any]:
        """The settings of a connection to a sentinel: ``socket_settings``, its own
        credentials, and TLS as the data nodes have it."""
        settings = {**socket_settings, **self.sentinel_auth}
        if self.tls:
            settings["ssl"] = True
            settings.update((k, v) for k, v in self.options.items() if k.startswith("ssl_"))
        return settings


def is_sentinel_endpoint(endpoint: str) -> bool:
    """Whether a normalized endpoint names a service behind Redis Sentinel."""
    return urlsplit(endpoint).scheme in SENTINEL_SCHEMES


def parse_sentinel_endpoint(endpoint: str, shown: str) -> SentinelEndpoint:
    """``endpoint`` read; :class:`InvalidEndpointError` naming ``shown`` (the endpoint,
    redacted) for no sentinel, a bad address or port, no service name, or a database
    that is not a number."""
    parts = urlsplit(endpoint)
    userinfo, at, hosts = parts.netloc.rpartition("@")
    sentinels = tuple(_sentinel_address(host, shown) for host in hosts.split(","))
    service, _, database = parts.path.lstrip("/").partition("/")
    if not service:
        raise InvalidEndpointError(
            f"endpoint {shown!r} names no service: put the name the sentinels monitor "
            "the primary by (`sentinel monitor NAME ...`) in its path, e.g. "
            "redis+sentinel://host1:26379,host2:26379/mymaster"
        )
    database = database.strip("/")
    if database and not database.isdigit():
        raise InvalidEndpointError(
            f"endpoint {shown!r}: the path after the service names the database, a number "
            f"(redis+sentinel://host:26379/mymaster/0), not {database!r}"
        )
    query = parse_qsl(parts.query, keep_blank_values=True)
    ours = _SENTINEL_ARGUMENTS
    sentinel_auth = {n.removeprefix("sentinel_"): v for n, v in query if n in ours}
    rest = urlencode([(n, v) for n, v in query if n not in ours])
    tls = parts.scheme.startswith("rediss")
    if not tls and (tls_only := next((n for n, _ in query if n.startswith("ssl_")), None)):
        raise InvalidEndpointError(
            f"endpoint {shown!r}: {tls_only} is a TLS setting; use rediss+sentinel:// "
            "for TLS to the sentinels and the data nodes"
        )
    # The data nodes' settings, read as redis-py reads a plain URL's (the host is the
    # sentinels' to name).
    plain = f"{'rediss' if tls else 'redis'}://{userinfo}{at}primary/{database or 0}"
    try:
        options = dict(parse_url(f"{plain}?{rest}" if rest else plain))  # type: ignore[no-untyped-call]
    except ValueError as exc:
        raise InvalidEndpointError(f"endpoint {shown!r}: {exc}") from None
    for name in ("host", "port", "connection_class"):
        options.pop(name, None)
    return SentinelEndpoint(sentinels, unquote(service), tls, options, sentinel_auth)


def _sentinel_address(host: str, shown: str) -> tuple[str, int]:
    if not host:
        raise InvalidEndpointError(
            f"endpoint {shown!r} has an empty sentinel address: name each sentinel as "
            "host:port, separated by commas"
        )
    parts = urlsplit(f"//{host}")
    try:
        port = parts.port
    except ValueError:
        raise InvalidEndpointError(
            f"endpoint {shown!r} has an invalid port in sentinel address {host!r}"
        ) from None
    if not parts.hostname:
        raise InvalidEndpointError(f"endpoint {shown!r} has a sentinel address with no host")
    return parts.hostname, DEFAULT_SENTINEL_PORT if port is None else port


# --- connections ------------------------------------------------------------------------


class _Connection(async_sentinel.SentinelManagedConnection):
    """A connection to the service's primary, which answers ``READONLY`` as Redis does
    (redis-py's own turns it into a lost connection): a script refused there did not
    run, and flo-redis's ``READONLY`` path resends it and moves the subscriptions
    (:mod:`flo_redis._wire.runner`). The connection is closed first, so it asks the
    sentinels for the primary when it is used again. (redis-py's other translation, of
    a blocking command unblocked by a demotion, has nothing to do here: flo-redis sends
    no blocking commands.)"""

    async def read_response(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return await AbstractConnection.read_response(self, *args, **kwargs)
        except rex.ReadOnlyError:
            await self.disconnect()
            raise


class _SSLConnection(_Connection, async_sentinel.SentinelManagedSSLConnection):
    """:class:`_Connection` over TLS."""


class _Pool(async_sentinel.SentinelConnectionPool, BlockingConnectionPool):
    """redis-py's pool of connections to a service's primary, which waits for a free
    connection (up to its timeout) instead of raising at its limit, as the pool of a
    plain endpoint does; closing it closes the sentinels' connections too."""

    async def disconnect(self, inuse_connections: bool = True) -> None:
        await super().disconnect(inuse_connections)
        if inuse_connections:  # the client is closing (closing twice is harmless)
            await self.sentinel_manager.aclose()


def connect_sentinel(
    endpoint: SentinelEndpoint, settings: dict[str, Any], *, max_connections: int, timeout_s: float
) -> Redis:
    """An asyncio client of the primary of ``endpoint``'s service, its connections made
    with ``settings`` (the socket settings of a plain endpoint): at most
    ``max_connections``, a command waiting up to ``timeout_s`` for a free one."""
    kinds = (_Connection, _SSLConnection)
    sizing = {"max_connections": max_connections, "timeout": timeout_s}
    pool = _pool(_Pool, async_sentinel.Sentinel, kinds, endpoint, {**settings, **sizing})
    return Redis.from_pool(pool)


class _SyncConnection(sync_sentinel.SentinelManagedConnection):
    """:class:`_Connection` for redis-py's blocking client."""

    def read_response(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return SyncAbstractConnection.read_response(self, *args, **kwargs)
        except rex.ReadOnlyError:
            self.disconnect()  # type: ignore[no-untyped-call]
            raise


class _SyncSSLConnection(_SyncConnection, sync_sentinel.SentinelManagedSSLConnection):
    """:class:`_SyncConnection` over TLS."""


class _SyncPool(sync_sentinel.SentinelConnectionPool):
    """redis-py's blocking pool of connections to a service's primary; closing it closes
    the sentinels' connections too."""

    def disconnect(self, inuse_connections: bool = True) -> None:
        super().disconnect(inuse_connections)
        if inuse_connections:
            self.sentinel_manager.close()


def connect_sentinel_sync(endpoint: SentinelEndpoint, settings: dict[str, Any]) -> redis.Redis:
    """:func:`connect_sentinel` for redis-py's blocking client."""
    kinds = (_SyncConnection, _SyncSSLConnection)
    pool = _pool(_SyncPool, sync_sentinel.Sentinel, kinds, endpoint, settings)
    return redis.Redis.from_pool(pool)


def _pool(
    pool: type[Any],
    sentinel: type[Any],
    kinds: tuple[type[Any], type[Any]],
    endpoint: SentinelEndpoint,
    settings: dict[str, Any],
) -> Any:
    """A ``pool`` of connections to ``endpoint``'s primary, of the first of ``kinds``
    (the second over TLS), made with ``settings``; the sentinels are asked through a
    ``sentinel`` made with the socket settings among them."""
    sentinels = sentinel(
        endpoint.sentinels, sentinel_kwargs=endpoint.sentinel_settings(_socket_only(settings))
    )
    kind = kinds[1] if endpoint.tls else kinds[0]
    options = {**endpoint.options, **settings}  # the client's own settings win
    return pool(endpoint.service, sentinels, connection_class=kind, **options)


def _socket_only(settings: dict[str, Any]) -> dict[str, Any]:
    """What of a data connection's ``settings`` a sentinel's connection takes too."""
    return {k: v for k, v in settings.items() if k.startswith("socket_") or k == "retry"}


# --- when no primary is found ----------------------------------------------------------

# What redis-py raises when no sentinel names a primary that is up.
NO_PRIMARY = (async_sentinel.MasterNotFoundError, sync_sentinel.MasterNotFoundError)
Answers = Sequence[tuple[str, "dict[str, Any] | Exception"]]


async def no_primary_found(conn: Redis) -> ConnectionFailedError:
    """The error for a client whose sentinels named no primary (:data:`NO_PRIMARY`),
    saying why: each sentinel is asked which services it monitors."""
    pool = conn.connection_pool
    answers: list[tuple[str, dict[str, Any] | Exception]] = []
    for client in pool.sentinel_manager.sentinels:  # type: ignore[attr-defined]
        try:
            answers.append((_where(client), await client.sentinel_masters()))
        except (rex.RedisError, OSError) as exc:
            answers.append((_where(client), exc))
    return no_primary(pool.service_name, answers)  # type: ignore[attr-defined]


def no_primary_found_sync(conn: redis.Redis) -> ConnectionFailedError:
    """:func:`no_primary_found` for redis-py's blocking client."""
    pool = conn.connection_pool
    answers: list[tuple[str, dict[str, Any] | Exception]] = []
    for client in pool.sentinel_manager.sentinels:  # type: ignore[attr-defined]
        try:
            answers.append((_where(client), client.sentinel_masters()))
        except (rex.RedisError, OSError) as exc:
            answers.append((_where(client), exc))
    return no_primary(pool.service_name, answers)  # type: ignore[attr-defined]


def no_primary(service: str, answers: Answers) -> ConnectionFailedError:
    """The error for ``service`` when no sentinel named its primary, from what each one
    answered to ``SENTINEL MASTERS`` (``answers``: its address, and the services it
    monitors or why it did not answer)."""
    failed = [(where, a) for where, a in answers if isinstance(a, Exception)]
    known = [a for _, a in answers if isinstance(a, dict)]
    addresses = ", ".join(where for where, _ in answers)
    if not known:
        by_cause: dict[str, list[str]] = {}
        for where, exc in failed:
            by_cause.setdefault(str(exc) or type(exc).__name__, []).append(where)
        why = "; ".join(f"{', '.join(places)}: {cause}" for cause, places in by_cause.items())
        refused = any(_refused(exc) for _, exc in failed)
        hint = (
            "check sentinel_password (and sentinel_username) in the URL's query"
            if refused
            else "check the sentinels' hosts and ports in the URL, and that they run"
        )
        return ConnectionFailedError(f"no Redis Sentinel answered ({why}); {hint}")
    if not any(service in services for services in known):
        names = sorted({str(name) for services in known for name in services})
        return ConnectionFailedError(
            f"the sentinels at {addresses} monitor no service named {service!r} "
            f"(they monitor: {', '.join(names) or 'none'}); check the service name in the "
            "URL's path against `sentinel monitor` in the sentinels' configuration"
        )
    return ConnectionFailedError(
        f"the sentinels at {addresses} know service {service!r} but name no primary "
        "that is up (it is down, and a failover may be under way); retry shortly, or "
        "check that a replica can be promoted"
    )


def _refused(exc: Exception) -> bool:
    return isinstance(exc, rex.AuthenticationError)


def _where(client: Any) -> str:
    kwargs = client.connection_pool.connection_kwargs
    return f"{kwargs.get('host')}:{kwargs.get('port')}"
