"""Endpoints and connections: flo's ``host:port`` or a Redis URL, made into a redis-py
client with flo-redis's socket settings, and the server's version checked.

The endpoint is a Redis URL (``redis://``, ``rediss://``, ``unix://``, with ACL user and
password) or flo's bare ``host:port``; a Redis Cluster is reached with
``redis+cluster://host:port`` (``rediss+cluster://`` for TLS) or ``cluster=True``, naming
any one node (the others are discovered); a primary watched by Redis Sentinel with
``redis+sentinel://host1:port1,host2:port2/SERVICE`` (:mod:`flo_redis._session.sentinel`).
"""

from __future__ import annotations

import asyncio
import re
import ssl
from typing import Any
from urllib.parse import urlsplit

from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.connection import Connection
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.maint_notifications import MaintNotificationsConfig

from flo_redis._session.sentinel import (
    SENTINEL_SCHEMES,
    connect_sentinel,
    is_sentinel_endpoint,
    parse_sentinel_endpoint,
)
from flo_redis._wire.lane import closed_by_server
from flo_redis.errors import ConnectionFailedError, InvalidEndpointError

#: Commands one client has in flight at most (one connection each); more wait their turn.
DEFAULT_MAX_CONNECTIONS = 100
# On a cluster, each node's pool has this many connections more than the commands in
# flight, for the few commands sent outside the script path (TIME, INFO, HSET).
_CLUSTER_SPARE_CONNECTIONS = 8
MIN_REDIS = (7, 0)
_SCHEMES = ("redis", "rediss", "unix", "redis+cluster", "rediss+cluster", *SENTINEL_SCHEMES)
_CLUSTER_SUFFIX = "+cluster"


def normalize_endpoint(endpoint: str, *, cluster: bool = False) -> str:
    """A Redis URL for ``endpoint``; flo's bare ``host:port`` becomes ``redis://host:port``.
    With ``cluster`` (or a ``redis+cluster://`` / ``rediss+cluster://`` URL) the result
    has the ``+cluster`` scheme, so every connection made from it reaches a cluster.
    A ``redis+sentinel://`` URL is checked whole (sentinels, service, database, query).
    A refusal names the endpoint with its password hidden (:func:`redact`)."""
    if not isinstance(endpoint, str):
        raise InvalidEndpointError(
            f"endpoint must be a Redis URL (a str), got {type(endpoint).__name__}"
        )
    if not endpoint.strip():
        raise InvalidEndpointError(f"endpoint must be a Redis URL, got {endpoint!r}")
    endpoint = endpoint.strip()
    if "://" not in endpoint:
        endpoint = f"redis://{endpoint}"
    shown = redact(endpoint)
    try:
        parts = urlsplit(endpoint)
    except ValueError as exc:  # an unclosed IPv6 bracket
        raise InvalidEndpointError(f"endpoint {shown!r} is not a URL ({exc})") from None
    if ("cluster" in parts.scheme and "sentinel" in parts.scheme) or (
        cluster and parts.scheme in SENTINEL_SCHEMES
    ):
        raise InvalidEndpointError(
            f"endpoint {shown!r}: a Redis Cluster fails over by itself and has no "
            "sentinels; use redis+cluster://host:port for a cluster, or "
            "redis+sentinel://host:port/SERVICE (without cluster=True) for Sentinel"
        )
    if parts.scheme not in _SCHEMES:
        raise InvalidEndpointError(
            f"endpoint {shown!r} has scheme {redact(parts.scheme)!r}; use redis://, "
            "rediss://, unix://, redis+cluster:// / rediss+cluster:// for a Redis Cluster, "
            "or redis+sentinel:// / rediss+sentinel:// for Redis Sentinel"
        )
    if parts.scheme in SENTINEL_SCHEMES:
        parse_sentinel_endpoint(endpoint, shown)
        return endpoint
    if cluster and not parts.scheme.endswith(_CLUSTER_SUFFIX):
        if parts.scheme == "unix":
            raise InvalidEndpointError(
                f"endpoint {shown!r}: a Redis Cluster is reached over TCP, not a unix socket"
            )
        endpoint = parts.scheme + _CLUSTER_SUFFIX + endpoint[len(parts.scheme) :]
        parts = urlsplit(endpoint)
        shown = redact(endpoint)
    if parts.scheme != "unix":
        try:
            parts.port  # noqa: B018 - validates the port
        except ValueError:
            raise InvalidEndpointError(f"endpoint {shown!r} has an invalid port") from None
        if not parts.hostname:
            raise InvalidEndpointError(f"endpoint {shown!r} names no host")
        database = parts.path.strip("/")
        if database and not database.isdigit():
            raise InvalidEndpointError(
                f"endpoint {shown!r}: its path names the database, a number "
                f"(redis://host:6379/0), not {redact(database)!r}"
            )
    elif not parts.path:
        raise InvalidEndpointError(f"endpoint {shown!r} names no socket path")
    return endpoint


def is_cluster_endpoint(endpoint: str) -> bool:
    """Whether a normalized endpoint names a Redis Cluster."""
    return urlsplit(endpoint).scheme.endswith(_CLUSTER_SUFFIX)


def connect_redis(
    endpoint: str,
    *,
    timeout_s: float,
    client_name: str | None = None,
    max_connections: int = DEFAULT_MAX_CONNECTIONS,
) -> Redis | RedisCluster:
    """A redis-py client for a normalized ``endpoint``: a :class:`RedisCluster` for a
    ``+cluster`` URL, else a plain :class:`Redis` (for a ``+sentinel`` URL, one whose
    connections ask the sentinels for the primary: a failover is followed by connecting
    again). No retries (flo-redis decides what may
    be resent), ``timeout_s`` on every socket operation, TCP keepalive on TCP. Connections
    are made on first use; a cluster must be ``await``-ed ``initialize()``-d.

    At most ``max_connections`` connections are open to one server (to each node of a
    cluster); a command that finds them all busy waits for one to come free (up to
    ``timeout_s``) instead of failing — redis-py's own pool would raise "Too many
    connections". On a cluster the wait happens in the session's script runner
    (:class:`flo_redis._wire.runner.ScriptRunner`, ``max_in_flight``), redis-py's cluster
    pool having no waiting mode; a command that finds a node's connections all busy all
    the same is refused unsent (OVERLOADED), and script calls and status reads are sent
    again as the retry policy says."""
    kwargs: dict[str, Any] = {
        "socket_timeout": timeout_s,
        "socket_connect_timeout": timeout_s,
        "health_check_interval": 0,
        "decode_responses": False,
        "retry": Retry(NoBackoff(), 0),
    }
    if client_name is not None:
        kwargs["client_name"] = client_name
    if not endpoint.startswith("unix://"):
        kwargs["socket_keepalive"] = True  # a unix socket connection takes no keepalive
    if is_cluster_endpoint(endpoint):
        scheme = urlsplit(endpoint).scheme
        url = scheme[: -len(_CLUSTER_SUFFIX)] + endpoint[len(scheme) :]
        spare = max_connections + _CLUSTER_SPARE_CONNECTIONS
        cluster = RedisCluster.from_url(url, max_connections=spare, **kwargs)
        _look_before_sending(cluster)
        return cluster
    if hasattr(BlockingConnectionPool, "maint_notifications_enabled"):
        # redis-py 8.1's asyncio pool, with maintenance notifications on (its default,
        # "auto"), hands out a pooled connection the server closed while it sat idle (a
        # restart, a failover, CLIENT KILL, the server's idle timeout): the check that
        # would make it again is skipped, and the first call on it fails as "Connection
        # closed by server" although Redis is back. Notifications off, the check runs;
        # flo-redis does not use them (its own outage handling reconnects).
        kwargs["maint_notifications_config"] = MaintNotificationsConfig(enabled=False)
    if is_sentinel_endpoint(endpoint):
        target = parse_sentinel_endpoint(endpoint, redact(endpoint))
        return connect_sentinel(
            target, kwargs, max_connections=max_connections, timeout_s=timeout_s
        )
    pool = BlockingConnectionPool.from_url(
        endpoint, max_connections=max_connections, timeout=timeout_s, **kwargs
    )
    return Redis.from_pool(pool)


# Connection classes made to look before they send (_look_before_sending), by the class
# they are made from.
_LOOKING: dict[type[Connection], type[Connection]] = {}


def _looking(base: type[Connection]) -> type[Connection]:
    made = _LOOKING.get(base)
    if made is None:

        class Looking(base):  # type: ignore[valid-type, misc]
            made_from = base  # plain_connection_class

            async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
                if closed_by_server(self):
                    await self.disconnect(nowait=True)  # and connected again to send
                await super().send_packed_command(command, check_health)

        Looking.__name__ = Looking.__qualname__ = f"Looking{base.__name__}"
        made = _LOOKING[base] = Looking
    return made


def plain_connection_class(cls: type[Any]) -> type[Any]:
    """The redis-py class a cluster node's connection class was made from (a pub/sub
    connection is made again by its own reader, never silently before a send)."""
    made_from: type[Any] = cls.__dict__.get("made_from", cls)
    return made_from


def _look_before_sending(cluster: RedisCluster) -> None:
    """Make every connection of ``cluster`` look before it sends a command whether the
    server closed it while it sat idle (a node's restart or failover, CLIENT KILL, the
    server's idle timeout), and connect again first if so. redis-py's asyncio cluster
    takes a node's next free connection without a look, so the first call on each such
    connection would fail as "Connection closed by server" although the node is back;
    a command never written there ran nowhere, so sending it on a new connection is
    safe. (A plain client's pool makes that check itself: :func:`connect_redis`.)"""
    manager = cluster.nodes_manager
    base = manager.connection_kwargs.get("connection_class", Connection)
    looking = _looking(base)
    manager.connection_kwargs["connection_class"] = looking
    for node in manager.startup_nodes.values():
        node.connection_class = looking


def is_tls_failure(exc: BaseException, *, tls: bool = False) -> bool:
    """Whether a failed connect failed in its TLS handshake (certificate refused,
    certificate required, protocol mismatch) rather than for want of a server.

    With ``tls`` (a ``rediss`` endpoint), a connection that was made and then dropped
    by the server on its first read counts too: under TLS 1.3 a server that refuses the
    client's certificate does so after the client's side of the handshake has finished,
    and the client may see only the dropped connection, not the alert."""
    seen: BaseException | None = exc
    for _ in range(5):
        if seen is None:
            return False
        if isinstance(seen, ssl.SSLError) or "[SSL" in str(seen):
            return True
        if tls and (
            isinstance(seen, (ConnectionResetError, BrokenPipeError))
            or "Error while reading from" in str(seen)
            or "Connection closed by server" in str(seen)
        ):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


async def answers_plaintext(endpoint: str, timeout_s: float = 1.0) -> bool:
    """Whether what listens at a ``rediss`` endpoint's host and port answers a plain
    ``PING``: a server without TLS, which a TLS handshake only waits on until it times
    out (the handshake's first bytes are no command it can finish reading)."""
    parts = urlsplit(endpoint)
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(parts.hostname or "localhost", parts.port or 6379), timeout_s
        )
    except (OSError, asyncio.TimeoutError):
        return False
    try:
        writer.write(b"PING\r\n")
        reply = await asyncio.wait_for(reader.read(64), timeout_s)
    except (OSError, asyncio.TimeoutError):
        return False
    finally:
        writer.close()
    return reply[:1] in (b"+", b"-")  # +PONG, or -NOAUTH: a Redis speaking plain RESP


# A query argument that carries a secret (redis-py reads ``?password=...`` as the
# password; ``ssl_password`` unlocks a TLS key).
_SECRET_ARGUMENT = re.compile(r"(?i)([?&][^=&#]*(?:pass|secret|token)[^=&#]*=)[^&#]*")


def redact(url: str) -> str:
    """``url`` as it may be shown in a message or a log line: a password in it reads
    ``***``, and so does every query argument that carries one (``?password=``,
    ``ssl_password=``).

    Works on any text, a URL that does not parse included. Everything before the last
    ``@`` after the scheme is taken for the user and password (a password with an
    unencoded ``/``, ``?``, ``#`` or ``@`` in it too); the part before its first ``:``
    is shown as the user name, and without a ``:`` the whole of it is hidden (a password
    written where the user name goes)."""
    text = str(url)
    start = text.find("://")
    start = 0 if start < 0 else start + 3
    at = text.rfind("@", start)
    if at >= 0:
        user, colon, _ = text[start:at].partition(":")
        shown = f"{user}:***" if colon else "***"
        text = f"{text[:start]}{shown}{text[at:]}"
    return _SECRET_ARGUMENT.sub(r"\1***", text)


async def server_version(conn: Redis | RedisCluster) -> str:
    """The lowest ``redis_version`` among the server (every primary of a cluster)."""
    if isinstance(conn, RedisCluster):
        await conn.initialize()
        return lowest_version(await conn.info("server", target_nodes=RedisCluster.PRIMARIES))
    info: dict[str, Any] = await conn.info("server")
    return str(info.get("redis_version", "0"))


def lowest_version(replies: dict[str, Any]) -> str:
    """The lowest ``redis_version`` in the ``INFO server`` of a cluster's primaries.
    redis-py answers a command sent to several nodes with a reply per node, but one
    sent to a single node (a cluster of one primary, as a one-shard managed cluster
    is) with that node's reply alone."""
    per_node = bool(replies) and all(isinstance(info, dict) for info in replies.values())
    infos = list(replies.values()) if per_node else [replies]
    versions = [str(info.get("redis_version", "0")) for info in infos]
    return min(versions or ["0"], key=version_tuple)


def unreachable(endpoint: str, exc: BaseException) -> ConnectionFailedError:
    """The error for a Redis that does not answer at ``endpoint``, saying how to start
    one (both clients raise it)."""
    return ConnectionFailedError(
        f"cannot reach Redis at {redact(endpoint)} ({exc}). Start one with "
        "`docker compose up -d` in the flo-redis checkout, or install and run "
        "`redis-server`, or point the endpoint at your Redis."
    )


def version_tuple(version: str) -> tuple[int, int]:
    parts = version.split(".")
    try:
        return int(parts[0]), int(parts[1]) if len(parts) > 1 else 0
    except ValueError:
        return (0, 0)
