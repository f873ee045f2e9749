"""``FloClient``: flo's client, backed by a Redis you already run.

The endpoint is a Redis URL (``redis://``, ``rediss://``, ``unix://``, with ACL user and
password) or flo's bare ``host:port``; a Redis Cluster is reached with
``redis+cluster://host:port`` (``rediss+cluster://`` for TLS) or ``cluster=True``, naming
any one node (the others are discovered). Every state change is one Lua script; this class
composes a :class:`~flo_redis._session.session.Session` (connection, wake-ups, liveness, owner id,
settings) with the operation groups ``action``, ``worker``, ``stream``, ``queue``,
``slots`` and ``quarantine`` built on it, and makes workers.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import logging
import random
from collections.abc import Callable
from typing import Any, Concatenate, ParamSpec, TypeVar

from flo_redis._aio import ClosesOnExit
from flo_redis._session.endpoint import (
    DEFAULT_MAX_CONNECTIONS,
    connect_redis,
    is_cluster_endpoint,
    normalize_endpoint,
    redact,
)
from flo_redis._session.liveness import DEFAULT_GRACE_MS, Liveness
from flo_redis._session.registry import registered_namespaces
from flo_redis._session.session import (
    DEFAULT_MAX_PAYLOAD_BYTES,
    ClientSettings,
    Session,
    new_owner_id,
)
from flo_redis._session.wake import Waker
from flo_redis._wire.runner import RedisConn
from flo_redis.actions.concurrency import SlotOperations
from flo_redis.actions.operations import ActionOperations
from flo_redis.actions.workers import WorkerOperations
from flo_redis.durability import Durability, DurabilityLike, as_durability
from flo_redis.errors import ConnectionFailedError, RedisVersionError
from flo_redis.quarantine import QuarantineOperations
from flo_redis.queue.operations import QueueOperations
from flo_redis.retry import DEFAULT_RETRY_POLICY, RetryPolicy
from flo_redis.streams.operations import StreamOperations
from flo_redis.worker.action_worker import ActionWorker
from flo_redis.worker.stream_worker import StreamWorker

log = logging.getLogger("flo_redis.client")

__all__ = [
    "DEFAULT_MAX_CONNECTIONS",
    "DEFAULT_MAX_PAYLOAD_BYTES",
    "ClientSettings",
    "FloClient",
    "connect_redis",
    "is_cluster_endpoint",
    "normalize_endpoint",
]


P = ParamSpec("P")
W = TypeVar("W")


def _makes(
    worker: Callable[Concatenate[Any, P], W], *, first: tuple[str, ...] = ()
) -> Callable[[Callable[..., W]], Callable[Concatenate[Any, P], W]]:
    """A client method that makes ``worker`` on its client: it takes the worker's own
    keywords (declared, with their defaults, once: on the worker), typed as the
    worker's parameters but its client and shown as flo shows them: each keyword-only,
    ``first`` leading."""
    params = list(inspect.signature(worker).parameters.values())[1:]
    params.sort(key=lambda p: first.index(p.name) if p.name in first else len(first))
    shown = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in params]

    def wrap(method: Callable[..., W]) -> Callable[Concatenate[Any, P], W]:
        own = inspect.signature(method)
        method.__signature__ = own.replace(  # type: ignore[attr-defined]
            parameters=[next(iter(own.parameters.values())), *shown]
        )
        return method

    return wrap


class FloClient(ClosesOnExit):
    """A connection to a Redis that holds flo-style actions, workers and streams.

    ``timeout_ms`` bounds every command; long polls wait on wake-up subscriptions, never
    on a blocking command, so reports sent by the same client are never delayed behind a
    poll. ``max_payload_bytes`` is the largest input or result accepted before anything
    is sent (actions can set a lower limit when registered). ``max_connections`` caps the
    commands in flight at once (one connection each, per server or cluster node): more
    concurrent calls wait their turn for a connection (up to ``timeout_ms``) rather than
    fail. Wake-ups and liveness have connections of their own, outside this cap.
    ``durability`` is the level of this client's writes that name none (invokes,
    reports, appends, acks; :class:`~flo_redis.durability.Durability`, or ``"primary"``,
    ``"replicated"``, ``"fsynced"``); a level the server cannot give is refused at
    ``connect()``.
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
        durability: DurabilityLike = Durability.PRIMARY,
    ) -> None:
        self.settings = ClientSettings(
            normalize_endpoint(endpoint, cluster=cluster),
            namespace=namespace,
            timeout_ms=timeout_ms,
            debug=bool(debug),
            retry=retry,
            max_payload_bytes=max_payload_bytes,
            owner_id=new_owner_id() if owner_id is None else owner_id,
            liveness_grace_ms=liveness_grace_ms,
            max_connections=max_connections,
            durability=as_durability(durability),
        )
        if self.settings.debug:
            # As flo does: debug output goes to stderr unless logging is set up already.
            logging.basicConfig(level=logging.DEBUG)
            for name in ("flo_redis.client", "flo_redis.requests"):
                logging.getLogger(name).setLevel(logging.DEBUG)
        self.session = Session(self.settings)
        self.action = ActionOperations(self.session)
        self.worker = WorkerOperations(self.session)
        self.stream = StreamOperations(self.session)
        self.queue = QueueOperations(self.session)
        self.slots = SlotOperations(self.session)
        self.quarantine = QuarantineOperations(self.session)

    # --- flo's surface -------------------------------------------------------------

    @property
    def namespace(self) -> str:
        """The namespace calls use unless their options name another."""
        return self.settings.namespace

    @property
    def is_connected(self) -> bool:
        return self.session.is_connected

    @property
    def is_cluster(self) -> bool:
        """Whether the endpoint is a Redis Cluster."""
        return self.session.is_cluster

    @property
    def owner_id(self) -> str:
        """This process's owner id: every lease it takes records it."""
        return self.settings.owner_id

    @property
    def liveness_grace_ms(self) -> int:
        """How long this client's workers let an owner stay absent before taking its work."""
        return self.settings.liveness_grace_ms

    @property
    def liveness(self) -> Liveness:
        """This process's liveness subscriptions: one owner channel per hash slot it
        takes work in, held on a dedicated pub/sub connection made on first use."""
        return self.session.liveness

    async def connect(self) -> FloClient:
        """Connect and check the server: reachable, authenticated, Redis 7.0 or newer.

        Raises :class:`ConnectionFailedError` (with how to start Redis) when nothing
        answers, and :class:`RedisVersionError` for a server older than 7.0.
        """
        await self.session.connect()
        return self

    async def close(self) -> None:
        """Close every connection of this client. Safe to call twice."""
        await self.session.close()

    def interrupt(self) -> None:
        """Wake every long poll of this client now; they return empty. Never blocks."""
        self.session.interrupt()

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
                if self.settings.debug:
                    log.debug("Reconnected to %s", redact(self.settings.endpoint))
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

    def get_namespace(self, override: str | None) -> str:
        """``override`` if given (validated), else the client's namespace."""
        return self.session.get_namespace(override)

    @_makes(ActionWorker)
    def new_action_worker(self, **options: Any) -> ActionWorker:
        """An :class:`ActionWorker` on this client's endpoint and namespace; it takes the
        worker's keywords: ``serializer`` encodes handler results that are not bytes;
        ``tune_gc`` (see :class:`~flo_redis.worker.ActionWorkerOptions`) False leaves the
        process's garbage collector alone; ``offer_window_ms``: how long a run handed to
        the idle worker waits for its accept before it goes back to its queue for another
        worker; ``durability``: the level of its completes and fails (None: this
        client's); ``executor``: a :class:`~flo_redis.worker.ProcessExecutor` runs its
        plain ``def`` handlers in child processes (None: in its threads)."""
        return ActionWorker(self, **options)

    @_makes(StreamWorker, first=("stream", "group", "handler"))
    def new_stream_worker(self, *given: Any, **options: Any) -> StreamWorker:
        """A :class:`StreamWorker` on this client's endpoint and namespace; it takes the
        worker's keywords: ``durability``: the level of its acks (None: this client's);
        ``executor``: a :class:`~flo_redis.worker.ProcessExecutor` runs a plain ``def``
        handler in child processes (None: in its threads)."""
        return StreamWorker(self, *given, **options)

    def sibling(
        self, durability: Durability | None = None, *, namespace: str | None = None
    ) -> FloClient:
        """A new, unconnected client with this one's endpoint, namespace and settings
        (and its own owner id; its writes at ``durability`` when given; in ``namespace``
        when given): the connections a worker opens for itself."""
        level = self.settings.durability if durability is None else durability
        settings = dataclasses.replace(
            self.settings,
            owner_id=new_owner_id(),
            durability=level,
            namespace=self.namespace if namespace is None else namespace,
        )
        # Its fields are FloClient's keywords; a cluster endpoint stays one (+cluster).
        return FloClient(
            **{f.name: getattr(settings, f.name) for f in dataclasses.fields(settings)}
        )

    # --- the session's, for code written against the client --------------------------

    @property
    def redis(self) -> RedisConn:
        """The live connection pool; :class:`NotConnectedError` before ``connect()``."""
        return self.session.redis

    @property
    def waker(self) -> Waker:
        return self.session.waker

    @property
    def max_payload_bytes(self) -> int:
        return self.settings.max_payload_bytes

    async def namespaces(self) -> tuple[str, ...]:
        """Every namespace that registered an action or a worker, or made a stream, in
        name order (from the namespace registry; never a scan)."""
        return await registered_namespaces(self.redis)

    async def server_time_ms(self) -> int:
        """Redis's clock, in ms (deadlines are always computed from it)."""
        return await self.session.server_time_ms()
