"""``FloClient``: flo's client, backed by a Redis you already run.

The endpoint is a Redis URL (``redis://``, ``rediss://``, ``unix://``, with ACL user and
password) or flo's bare ``host:port``; a Redis Cluster is reached with
``redis+cluster://host:port`` (``rediss+cluster://`` for TLS) or ``cluster=True``, naming
any one node (the others are discovered). Every state change is one Lua script; this class
holds the connection pool, the wake-up subscriptions and the namespace, and hands out the
operation groups ``action``, ``worker``, ``stream`` and ``queue``.
"""

from __future__ import annotations

import asyncio
import logging
import random
import secrets
import socket
from types import TracebackType
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import redis.exceptions as rex
from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from . import discovery
from ._denied import denied, is_denied
from ._scripts import RedisConn, configure, redis_errors
from ._wake import Waker
from .actions import ActionOperations
from .errors import (
    ConnectionFailedError,
    InvalidEndpointError,
    NotConnectedError,
    RedisVersionError,
    ValidationError,
)
from .keys import check_name, check_namespace
from .liveness import DEFAULT_GRACE_MS, Liveness
from .queue import QueueOperations
from .results import JSON, ResultSerializer
from .retry import DEFAULT_RETRY_POLICY, RetryPolicy
from .slots import SlotOperations
from .streams import StreamOperations
from .tasks import WorkerOperations

if TYPE_CHECKING:
    from .worker import ActionWorker, StreamHandler, StreamWorker

log = logging.getLogger("flo_redis.client")

DEFAULT_MAX_PAYLOAD_BYTES = 8 * 1024 * 1024
#: Commands one client has in flight at most (one connection each); more wait their turn.
DEFAULT_MAX_CONNECTIONS = 100
# On a cluster, each node's pool has this many connections more than the commands in
# flight, for the few commands sent outside the script path (TIME, INFO, HSET).
_CLUSTER_SPARE_CONNECTIONS = 8
MIN_REDIS = (7, 0)
_SCHEMES = ("redis", "rediss", "unix", "redis+cluster", "rediss+cluster")
_CLUSTER_SUFFIX = "+cluster"


def normalize_endpoint(endpoint: str, *, cluster: bool = False) -> str:
    """A Redis URL for ``endpoint``; flo's bare ``host:port`` becomes ``redis://host:port``.
    With ``cluster`` (or a ``redis+cluster://`` / ``rediss+cluster://`` URL) the result
    has the ``+cluster`` scheme, so every connection made from it reaches a cluster."""
    if not isinstance(endpoint, str) or not endpoint.strip():
        raise InvalidEndpointError(f"endpoint must be a Redis URL, got {endpoint!r}")
    endpoint = endpoint.strip()
    if "://" not in endpoint:
        endpoint = f"redis://{endpoint}"
    parts = urlsplit(endpoint)
    if parts.scheme not in _SCHEMES:
        raise InvalidEndpointError(
            f"endpoint {endpoint!r} has scheme {parts.scheme!r}; use redis://, rediss://, "
            "unix://, or redis+cluster:// / rediss+cluster:// for a Redis Cluster"
        )
    if cluster and not parts.scheme.endswith(_CLUSTER_SUFFIX):
        if parts.scheme == "unix":
            raise InvalidEndpointError(
                f"endpoint {endpoint!r}: a Redis Cluster is reached over TCP, not a unix socket"
            )
        endpoint = parts.scheme + _CLUSTER_SUFFIX + endpoint[len(parts.scheme) :]
        parts = urlsplit(endpoint)
    if parts.scheme != "unix":
        try:
            parts.port  # noqa: B018 - validates the port
        except ValueError as exc:
            raise InvalidEndpointError(f"endpoint {endpoint!r} has an invalid port") from exc
        if not parts.hostname:
            raise InvalidEndpointError(f"endpoint {endpoint!r} names no host")
    elif not parts.path:
        raise InvalidEndpointError(f"endpoint {endpoint!r} names no socket path")
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
    ``+cluster`` URL, else a plain :class:`Redis`. No retries (flo-redis decides what may
    be resent), ``timeout_s`` on every socket operation, TCP keepalive on TCP. Connections
    are made on first use; a cluster must be ``await``-ed ``initialize()``-d.

    At most ``max_connections`` connections are open to one server (to each node of a
    cluster); a command that finds them all busy waits for one to come free (up to
    ``timeout_s``) instead of failing — redis-py's own pool would raise "Too many
    connections". On a cluster the wait happens in :mod:`._scripts` (:func:`configure`),
    redis-py's cluster pool having no waiting mode."""
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
        return RedisCluster.from_url(url, max_connections=spare, **kwargs)
    pool = BlockingConnectionPool.from_url(
        endpoint, max_connections=max_connections, timeout=timeout_s, **kwargs
    )
    return Redis.from_pool(pool)


def _redact(url: str) -> str:
    parts = urlsplit(url)
    if parts.password:
        return url.replace(f":{parts.password}@", ":***@")
    return url


class FloClient:
    """A connection to a Redis that holds flo-style actions, workers and streams.

    ``timeout_ms`` bounds every command; long polls wait on wake-up subscriptions, never
    on a blocking command, so reports sent by the same client are never delayed behind a
    poll. ``max_payload_bytes`` is the largest input or result accepted before anything
    is sent (actions can set a lower limit when registered). ``max_connections`` caps the
    commands in flight at once (one connection each, per server or cluster node): more
    concurrent calls wait their turn for a connection (up to ``timeout_ms``) rather than
    fail. Wake-ups and liveness have connections of their own, outside this cap.
    """

    def __init__(
        self,
        endpoint: str,
        *,
        namespace: str = "default",
        timeout_ms: int = 5000,
        debug: bool = False,
        retry: RetryPolicy = DEFAULT_RETRY_POLICY,
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
        owner_id: str | None = None,
        cluster: bool = False,
        liveness_grace_ms: int = DEFAULT_GRACE_MS,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
    ) -> None:
        self._endpoint = normalize_endpoint(endpoint, cluster=cluster)
        self._namespace = check_namespace(namespace)
        if isinstance(timeout_ms, bool) or not isinstance(timeout_ms, int) or timeout_ms <= 0:
            raise ValidationError(f"timeout_ms must be a positive int, got {timeout_ms!r}")
        if (
            isinstance(max_payload_bytes, bool)
            or not isinstance(max_payload_bytes, int)
            or max_payload_bytes <= 0
        ):
            raise ValidationError(
                f"max_payload_bytes must be a positive int, got {max_payload_bytes!r}"
            )
        if (
            isinstance(max_connections, bool)
            or not isinstance(max_connections, int)
            or not 1 <= max_connections <= 10_000
        ):
            raise ValidationError(
                f"max_connections must be an int in [1, 10000], got {max_connections!r}"
            )
        self._max_connections = max_connections
        if not isinstance(retry, RetryPolicy):
            raise ValidationError(f"retry must be a RetryPolicy, got {type(retry).__name__}")
        self._timeout = timeout_ms / 1000.0
        self._debug = bool(debug)
        self._retry = retry
        if self._debug:
            # As flo does: debug output goes to stderr unless logging is set up already.
            logging.basicConfig(level=logging.DEBUG)
            for name in ("flo_redis.client", "flo_redis.requests"):
                logging.getLogger(name).setLevel(logging.DEBUG)
        self._max_payload = max_payload_bytes
        if owner_id is not None:
            check_name("owner id", owner_id)  # it names the owner's liveness channel
        self._owner = owner_id or f"{socket.gethostname()}-{secrets.token_hex(6)}"
        if (
            isinstance(liveness_grace_ms, bool)
            or not isinstance(liveness_grace_ms, int)
            or liveness_grace_ms < 0
        ):
            raise ValidationError(
                f"liveness_grace_ms must be an int >= 0, got {liveness_grace_ms!r}"
            )
        # How long this client's workers let an owner stay absent before taking its work.
        self.liveness_grace_ms = liveness_grace_ms
        self._redis: Redis | RedisCluster | None = None
        self._waker: Waker | None = None
        self._liveness: Liveness | None = None
        self._connect_lock = asyncio.Lock()
        self.action = ActionOperations(self)
        self.worker = WorkerOperations(self)
        self.stream = StreamOperations(self)
        self.queue = QueueOperations(self)
        self.slots = SlotOperations(self)

    # --- flo's surface -------------------------------------------------------------

    @property
    def namespace(self) -> str:
        """The namespace calls use unless their options name another."""
        return self._namespace

    @property
    def is_connected(self) -> bool:
        return self._redis is not None

    @property
    def is_cluster(self) -> bool:
        """Whether the endpoint is a Redis Cluster."""
        return is_cluster_endpoint(self._endpoint)

    @property
    def owner_id(self) -> str:
        """This process's owner id: every lease it takes records it."""
        return self._owner

    @property
    def liveness(self) -> Liveness:
        """This process's liveness subscriptions: one owner channel per hash slot it
        takes work in, held on a dedicated pub/sub connection made on first use."""
        if self._liveness is None:
            self._liveness = Liveness(self._owner, lambda: self.redis)
        return self._liveness

    async def connect(self) -> FloClient:
        """Connect and check the server: reachable, authenticated, Redis 7.0 or newer.

        Raises :class:`ConnectionFailedError` (with how to start Redis) when nothing
        answers, and :class:`RedisVersionError` for a server older than 7.0.
        """
        async with self._connect_lock:
            if self._redis is not None:
                return self
            conn = connect_redis(
                self._endpoint, timeout_s=self._timeout, max_connections=self._max_connections
            )
            try:
                version = await _server_version(conn)
            except rex.AuthenticationError as exc:
                await conn.aclose()
                raise ConnectionFailedError(
                    f"Redis at {_redact(self._endpoint)} refused the credentials ({exc}); "
                    "check the user and password in the URL"
                ) from exc
            except (
                rex.ConnectionError,
                rex.TimeoutError,
                rex.RedisClusterException,
                OSError,
            ) as exc:
                await conn.aclose()
                raise ConnectionFailedError(
                    f"cannot reach Redis at {_redact(self._endpoint)} ({exc}). Start one with "
                    "`docker compose up -d` in the flo-redis checkout, or install and run "
                    "`redis-server`, or point the endpoint at your Redis."
                ) from exc
            except rex.RedisError as exc:
                await conn.aclose()
                if is_denied(exc):
                    raise denied("connect (INFO server: the server's version)", exc) from exc
                raise ConnectionFailedError(
                    f"what answers at {_redact(self._endpoint)} is not a Redis server "
                    f"({type(exc).__name__}: {exc}); check the host and port in the URL"
                ) from exc
            if _version_tuple(version) < MIN_REDIS:
                await conn.aclose()
                raise RedisVersionError(version)
            configure(
                conn,
                retry=self._retry,
                debug=self._debug,
                max_in_flight=self._max_connections if isinstance(conn, RedisCluster) else 0,
            )
            self._redis = conn
            self._waker = Waker(conn)
            if self._debug:
                log.debug("Connected to %s (Redis %s)", _redact(self._endpoint), version)
            return self

    async def close(self) -> None:
        """Close every connection of this client. Safe to call twice."""
        async with self._connect_lock:
            waker, conn, live = self._waker, self._redis, self._liveness
            self._waker = None
            self._redis = None
            self._liveness = None
            if live is not None:
                await live.close()
            if waker is not None:
                await waker.close()
            if conn is not None:
                await conn.aclose()
                if self._debug:
                    log.debug("Disconnected from %s", _redact(self._endpoint))

    def interrupt(self) -> None:
        """Wake every long poll of this client now; they return empty. Never blocks."""
        if self._waker is not None:
            self._waker.interrupt()

    async def reconnect(self, *, timeout: float = 300.0) -> None:
        """Drop the connections and connect again, backing off 1 s doubling to 30 s;
        :class:`ConnectionFailedError` once ``timeout`` seconds have passed."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        delay = 1.0
        await self.close()
        while True:
            try:
                await self.connect()
                if self._debug:
                    log.debug("Reconnected to %s", _redact(self._endpoint))
                return
            except RedisVersionError:
                raise
            except ConnectionFailedError as exc:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    raise ConnectionFailedError(
                        f"could not reconnect to Redis within {timeout:g} s: {exc}"
                    ) from exc
                await asyncio.sleep(min(delay * (0.5 + random.random() / 2), remaining))
                delay = min(delay * 2, 30.0)

    async def __aenter__(self) -> FloClient:
        return await self.connect()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> None:
        await self.close()

    def get_namespace(self, override: str | None) -> str:
        """``override`` if given (validated), else the client's namespace."""
        return self._namespace if override is None else check_namespace(override)

    def new_action_worker(
        self,
        *,
        worker_id: str | None = None,
        concurrency: int = 10,
        action_timeout: float = 300.0,
        block_ms: int = 30000,
        auto_touch: bool = False,
        serializer: ResultSerializer = JSON,
    ) -> ActionWorker:
        """An :class:`ActionWorker` on this client's endpoint and namespace; ``serializer``
        encodes handler results that are not bytes."""
        from .worker import ActionWorker

        return ActionWorker(
            self,
            worker_id=worker_id,
            concurrency=concurrency,
            action_timeout=action_timeout,
            block_ms=block_ms,
            auto_touch=auto_touch,
            serializer=serializer,
        )

    def new_stream_worker(
        self,
        *,
        stream: str,
        group: str,
        handler: StreamHandler,
        consumer: str | None = None,
        worker_id: str | None = None,
        concurrency: int = 10,
        batch_size: int = 10,
        block_ms: int = 30000,
        message_timeout: float = 300.0,
        redeliver_pending_on_reconnect: bool = True,
        claim_min_idle_ms: int = 0,
    ) -> StreamWorker:
        """A :class:`StreamWorker` on this client's endpoint and namespace."""
        from .worker import StreamWorker

        return StreamWorker(
            self,
            handler,
            stream=stream,
            group=group,
            consumer=consumer,
            worker_id=worker_id,
            concurrency=concurrency,
            batch_size=batch_size,
            block_ms=block_ms,
            message_timeout=message_timeout,
            redeliver_pending_on_reconnect=redeliver_pending_on_reconnect,
            claim_min_idle_ms=claim_min_idle_ms,
        )

    def sibling(self) -> FloClient:
        """A new, unconnected client with this one's endpoint, namespace and settings
        (and its own owner id): the connections a worker opens for itself."""
        return FloClient(
            self._endpoint,  # a cluster endpoint stays one (redis+cluster://)
            namespace=self._namespace,
            timeout_ms=int(self._timeout * 1000),
            debug=self._debug,
            retry=self._retry,
            max_payload_bytes=self._max_payload,
            liveness_grace_ms=self.liveness_grace_ms,
            max_connections=self._max_connections,
        )

    # --- for the operation groups --------------------------------------------------

    @property
    def redis(self) -> RedisConn:
        """The live connection pool; :class:`NotConnectedError` before ``connect()``."""
        if self._redis is None:
            raise NotConnectedError("the client is not connected; call `await connect()` first")
        return self._redis

    @property
    def waker(self) -> Waker:
        if self._waker is None:
            raise NotConnectedError("the client is not connected; call `await connect()` first")
        return self._waker

    @property
    def max_payload_bytes(self) -> int:
        return self._max_payload

    async def namespaces(self) -> tuple[str, ...]:
        """Every namespace that registered an action or a worker, or made a stream, in
        name order (from the namespace registry; never a scan)."""
        return await discovery.namespaces(self)

    async def server_time_ms(self) -> int:
        """Redis's clock, in ms (deadlines are always computed from it)."""
        with redis_errors("TIME"):
            seconds, micros = await self.redis.time()
        return int(seconds) * 1000 + int(micros) // 1000


async def _server_version(conn: Redis | RedisCluster) -> str:
    """The lowest ``redis_version`` among the server (every primary of a cluster)."""
    if isinstance(conn, RedisCluster):
        await conn.initialize()
        replies: dict[str, dict[str, Any]] = await conn.info(
            "server", target_nodes=RedisCluster.PRIMARIES
        )
        versions = [str(info.get("redis_version", "0")) for info in replies.values()]
        return min(versions or ["0"], key=_version_tuple)
    info: dict[str, Any] = await conn.info("server")
    return str(info.get("redis_version", "0"))


def _version_tuple(version: str) -> tuple[int, int]:
    parts = version.split(".")
    try:
        return int(parts[0]), int(parts[1]) if len(parts) > 1 else 0
    except ValueError:
        return (0, 0)
