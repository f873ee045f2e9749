"""The session: what every operation group works with.

A :class:`Session` holds one client's connection pool, the script runner that sends
its scripts on it (:class:`~flo_redis._wire.runner.ScriptRunner`: its retry policy, lanes
and Functions state, its own and no other session's), its wake-up subscriptions, its
liveness subscriptions, its owner id and its :class:`ClientSettings`. The operation
groups (``client.action``, ``client.worker``, ``client.stream``, ``client.slots``) are
built on a session and depend on nothing else of the client; :class:`~flo_redis.FloClient`
composes one session with those groups.
"""

from __future__ import annotations

import asyncio
import logging
import math
import secrets
import socket
from dataclasses import dataclass, field, fields
from typing import TypeVar
from urllib.parse import urlsplit

import redis.exceptions as rex
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from flo_redis._aio import cancel_and_wait
from flo_redis._session.breaks import Breaks
from flo_redis._session.endpoint import (
    DEFAULT_MAX_CONNECTIONS,
    MIN_REDIS,
    answers_plaintext,
    connect_redis,
    is_cluster_endpoint,
    is_tls_failure,
    redact,
    server_version,
    unreachable,
    version_tuple,
)
from flo_redis._session.liveness import DEFAULT_GRACE_MS, Liveness
from flo_redis._session.sentinel import NO_PRIMARY, no_primary_found
from flo_redis._session.tracer import ProducerTracer
from flo_redis._session.wake import Waker
from flo_redis._wire.checks import check_count
from flo_redis._wire.denied import denied, is_denied
from flo_redis._wire.keys import ActionKeys, action_keys, check_name, check_namespace
from flo_redis._wire.runner import RedisConn, ScriptRunner, redis_errors
from flo_redis.durability import Durability, as_durability
from flo_redis.errors import (
    ConnectionFailedError,
    DurabilityUnsupportedError,
    NotConnectedError,
    RedisVersionError,
    ValidationError,
)
from flo_redis.retry import DEFAULT_RETRY_POLICY, RetryPolicy
from flo_redis.types import MAX_VALUE_SIZE

log = logging.getLogger("flo_redis.client")
T = TypeVar("T")

DEFAULT_MAX_PAYLOAD_BYTES = 8 * 1024 * 1024


def new_owner_id() -> str:
    """A fresh owner id: the host name and 48 random bits."""
    return f"{socket.gethostname()}-{secrets.token_hex(6)}"


@dataclass(frozen=True, slots=True)
class ClientSettings:
    """A client's settings, validated when made: a bad value is refused with a
    :class:`ValidationError` (or :class:`InvalidEndpointError`) that names it."""

    endpoint: str  # normalized: a cluster endpoint has a ``+cluster`` scheme
    namespace: str = "default"
    timeout_ms: int = 5000
    debug: bool = False
    retry: RetryPolicy = DEFAULT_RETRY_POLICY
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES
    owner_id: str = field(default_factory=new_owner_id)
    # How long this client's workers let an owner stay absent before taking its work.
    liveness_grace_ms: int = DEFAULT_GRACE_MS
    # Commands in flight at once (one connection each, per server or cluster node).
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    # The level of this client's writes that name none.
    durability: Durability = Durability.PRIMARY

    def __post_init__(self) -> None:
        check_namespace(self.namespace)
        check_count("timeout_ms", self.timeout_ms, 1)
        check_count("max_payload_bytes", self.max_payload_bytes, 1, MAX_VALUE_SIZE)
        check_count("max_connections", self.max_connections, 1, 10_000)
        if not isinstance(self.retry, RetryPolicy):
            raise ValidationError(f"retry must be a RetryPolicy, got {type(self.retry).__name__}")
        check_name("owner id", self.owner_id)  # it names the owner's liveness channel
        check_count("liveness_grace_ms", self.liveness_grace_ms, 0)
        object.__setattr__(self, "durability", as_durability(self.durability))

    @property
    def timeout_s(self) -> float:
        return self.timeout_ms / 1000.0

    def __repr__(self) -> str:
        """The settings, with the endpoint's password hidden (:func:`redact`)."""
        shown = (
            f"{f.name}={redact(self.endpoint) if f.name == 'endpoint' else getattr(self, f.name)!r}"
            for f in fields(self)
        )
        return f"ClientSettings({', '.join(shown)})"


class Session:
    """One client's connection, wake-ups, liveness, owner id and settings."""

    def __init__(self, settings: ClientSettings) -> None:
        self.settings = settings
        # The settings the operations read on every call (fixed, as the settings are): the
        # namespace, this process's owner id (every lease it takes records it), the
        # largest payload accepted, and how long an owner may stay absent.
        self.namespace = settings.namespace
        self.owner_id = settings.owner_id
        self.max_payload_bytes = settings.max_payload_bytes
        self.liveness_grace_ms = settings.liveness_grace_ms
        self._redis: Redis | RedisCluster | None = None
        self._runner: ScriptRunner | None = None
        self._waker: Waker | None = None
        self._liveness: Liveness | None = None
        # When the liveness connection is lost, and when it stands again (workers send
        # again what they reported just before: flo_redis.worker.replay).
        self.breaks = Breaks()
        self._connect_lock = asyncio.Lock()
        # Moving the subscriptions off a replica (_on_replica): the task, and when it began.
        self._moving: asyncio.Task[None] | None = None
        self._moved_at = -math.inf
        # Called around each invoke (flo_redis.ops.tracing); None: invokes store no trace.
        self.tracer: ProducerTracer | None = None

    @property
    def is_cluster(self) -> bool:
        return is_cluster_endpoint(self.settings.endpoint)

    @property
    def is_connected(self) -> bool:
        return self._redis is not None

    def get_namespace(self, override: str | None) -> str:
        """``override`` if given (validated), else the session's namespace."""
        return self.settings.namespace if override is None else check_namespace(override)

    @property
    def redis(self) -> RedisConn:
        """The live connection pool; :class:`NotConnectedError` before ``connect()``."""
        if self._redis is None:
            raise _not_connected()
        return self._redis

    @property
    def runner(self) -> ScriptRunner:
        """The script runner of this session's connection, made when it connects and
        released when it closes; :class:`NotConnectedError` before ``connect()``."""
        return _connected(self._runner)

    @property
    def waker(self) -> Waker:
        """The wake-up subscriptions; :class:`NotConnectedError` before ``connect()``."""
        return _connected(self._waker)

    @property
    def liveness(self) -> Liveness:
        """This process's liveness subscriptions: one owner channel per hash slot it
        takes work in, held on a dedicated pub/sub connection made on first use."""
        if self._liveness is None:
            self._liveness = Liveness(
                self.settings.owner_id, lambda: self.redis, breaks=self.breaks
            )
        return self._liveness

    async def server_time_ms(self) -> int:
        """Redis's clock, in ms (deadlines are always computed from it)."""
        with redis_errors("TIME"):
            seconds, micros = await self.redis.time()
        return int(seconds) * 1000 + int(micros) // 1000

    def interrupt(self) -> None:
        """Wake every long poll of this session now; they return empty. Never blocks."""
        if self._waker is not None:
            self._waker.interrupt()

    def _on_replica(self) -> None:
        """A call was answered ``READONLY``: a failover made the server this client
        reached a replica (``flo_redis._wire.runner``). The calls' connections are made
        again; so are the subscriptions', at most once a second: on the replica they
        would still hear what the primary publishes, but the primary would count none
        of them, and a live worker would look gone."""
        loop = asyncio.get_running_loop()
        if self._moving is not None and not self._moving.done():
            return
        if loop.time() - self._moved_at < _MOVE_EVERY_S:
            return
        self._moved_at = loop.time()
        subscribers = [s for s in (self._waker, self._liveness) if s is not None]
        self._moving = loop.create_task(
            _move_all(subscribers), name="flo-redis-subscriptions-off-replica"
        )

    async def connect(self) -> None:
        """Connect and check the server: reachable, authenticated, Redis 7.0 or newer.

        Raises :class:`ConnectionFailedError` (with how to start Redis) when nothing
        answers, and :class:`RedisVersionError` for a server older than 7.0."""
        endpoint = self.settings.endpoint
        async with self._connect_lock:
            if self._redis is not None:
                return
            conn = connect_redis(
                endpoint,
                timeout_s=self.settings.timeout_s,
                max_connections=self.settings.max_connections,
            )
            try:
                version = await server_version(conn)
            except rex.AuthenticationError as exc:
                await conn.aclose()
                raise ConnectionFailedError(
                    f"Redis at {redact(endpoint)} refused the credentials ({exc}); "
                    "check the user and password in the URL"
                ) from exc
            except NO_PRIMARY as exc:
                error = await no_primary_found(conn)  # type: ignore[arg-type]
                await conn.aclose()
                raise error from exc
            except (
                rex.ConnectionError,
                rex.TimeoutError,
                rex.RedisClusterException,
                OSError,
            ) as exc:
                await conn.aclose()
                tls = urlsplit(endpoint).scheme.startswith("rediss")
                if tls and await answers_plaintext(endpoint):
                    raise ConnectionFailedError(
                        f"TLS with Redis at {redact(endpoint)} failed: the server there "
                        "answers without TLS. Use a redis:// URL, or enable TLS on the "
                        "server (tls-port)."
                    ) from exc
                if is_tls_failure(exc, tls=tls):
                    raise ConnectionFailedError(
                        f"TLS with Redis at {redact(endpoint)} failed ({exc}). Check that "
                        "ssl_ca_certs in the URL names the CA that signed the server's "
                        "certificate, and give ssl_certfile / ssl_keyfile if the server asks "
                        "clients for a certificate."
                    ) from exc
                raise unreachable(endpoint, exc) from exc
            except rex.RedisError as exc:
                await conn.aclose()
                if is_denied(exc):
                    raise denied("connect (INFO server: the server's version)", exc) from exc
                if "DB index is out of range" in str(exc):
                    raise ConnectionFailedError(
                        f"Redis at {redact(endpoint)} has no database of the number in the "
                        "URL's path (DB index is out of range): use one below the server's "
                        "`databases` setting (16 by default), e.g. redis://host:6379/0"
                    ) from exc
                raise ConnectionFailedError(
                    f"what answers at {redact(endpoint)} is not a Redis server "
                    f"({type(exc).__name__}: {exc}); check the host and port in the URL"
                ) from exc
            if version_tuple(version) < MIN_REDIS:
                await conn.aclose()
                raise RedisVersionError(version)
            level = self.settings.durability
            if level.waits:
                try:
                    level.check_server(version)
                except DurabilityUnsupportedError:
                    await conn.aclose()
                    raise
            self._runner = ScriptRunner(
                conn,
                retry=self.settings.retry,
                debug=self.settings.debug,
                max_in_flight=self.settings.max_connections
                if isinstance(conn, RedisCluster)
                else 0,
                on_replica=self._on_replica,
                durability=self.settings.durability,
                server_version=version,
            )
            self._redis = conn
            self._waker = Waker(conn)
            if self.settings.debug:
                log.debug("Connected to %s (Redis %s)", redact(endpoint), version)

    async def close(self) -> None:
        """Close every connection of this session. Safe to call twice."""
        async with self._connect_lock:
            await cancel_and_wait(self._moving, quiet=True)
            self._moving = None
            waker, conn, live, runner = self._waker, self._redis, self._liveness, self._runner
            self._waker = None
            self._redis = None
            self._runner = None
            self._liveness = None
            if live is not None:
                await live.close()
            if waker is not None:
                await waker.close()
            if runner is not None:
                runner.release()
            if conn is not None:
                await conn.aclose()
                if self.settings.debug:
                    log.debug("Disconnected from %s", redact(self.settings.endpoint))


def _connected(part: T | None) -> T:
    """``part`` of a connected session; :class:`NotConnectedError` when it is None (the
    session is not connected, or was closed)."""
    if part is None:
        raise _not_connected()
    return part


def _not_connected() -> NotConnectedError:
    return NotConnectedError("the client is not connected; call `await connect()` first")


# The subscriptions are moved off a replica at most this often (Session._on_replica).
_MOVE_EVERY_S = 1.0


async def _move_all(subscribers: list[Waker | Liveness]) -> None:
    for subscriber in subscribers:
        try:
            await subscriber.move()
        except Exception as exc:  # closing a connection fails only as its socket did
            log.debug("moving subscriptions off a replica: %s", exc)


class Operations:
    """An operation group (``client.action``, ``client.worker``, ``client.slots`` ...):
    calls made on one session."""

    def __init__(self, session: Session) -> None:
        self._session = session

    def _action_keys(self, action: str, namespace: str | None) -> ActionKeys:
        """The keys of ``action`` in ``namespace`` (None: the session's)."""
        return action_keys(self._session.get_namespace(namespace), action)
