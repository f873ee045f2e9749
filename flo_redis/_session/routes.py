"""The connections a :class:`~flo_redis._session.pubsub.Subscriber` holds: one
:class:`Route` per Redis node (its own connection, made with the client's settings, and
the task reading it), and the cluster's slot map reloaded after a subscription was lost
(:class:`SlotMap`). Nothing here is shared between subscribers.

A route's connection speaks RESP2 and, on one Redis, refuses a replica as a failed
connection. Its reader (:func:`read_route`) takes each reply straight off the
connection: a published message goes to its channel's listeners at once, in the order
they were attached (a poller's hand-off inbox, attached first, starts a handed run
before the poll's watch is woken), and the reader then lets what it started run before
reading on; other replies (subscribe confirmations, unsubscribes, pongs) go through
redis-py's ``PubSub`` bookkeeping."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from typing import Any

import redis.exceptions as rex
from redis.asyncio import ConnectionPool, Redis
from redis.asyncio.client import PubSub
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.connection import AbstractConnection
from redis.crc import key_slot

from flo_redis._aio import cancel_and_wait
from flo_redis._session.endpoint import plain_connection_class
from flo_redis._wire.denied import denied, is_denied
from flo_redis.errors import NotConnectedError


async def connect_to_primary(conn: AbstractConnection) -> None:
    """Connect as usual, then refuse a replica as a connection that failed: after a
    failover, the address may lead to the old primary (now a replica) for a while, and
    what is subscribed there hears the primary's messages but is counted by nobody
    (liveness, hand-offs). A server that will not say (``INFO`` refused) counts as a
    primary."""
    await conn.on_connect()
    await conn.send_command("INFO", "replication")
    try:
        info = await conn.read_response()
    except rex.ResponseError:
        return
    if isinstance(info, bytes) and (b"role:slave" in info or b"role:replica" in info):
        raise rex.ConnectionError(
            "the server at this address is a replica now (a failover); "
            "subscribing again once it leads to the primary"
        )


class Route:
    """The subscriptions held on one Redis node: a connection and the task reading it."""

    def __init__(self, name: str, redis: Redis) -> None:
        self.name = name
        self.redis = redis
        self.pubsub: PubSub = redis.pubsub()
        self.reader: asyncio.Task[None] | None = None
        self.channels: set[str] = set()  # subscribed, or subscription sent
        self.leaving: Counter[str] = Counter()  # our own SUNSUBSCRIBEs not answered yet

    def read_by(self, reader: Callable[[Route], Coroutine[Any, Any, None]], purpose: str) -> None:
        """Read the connection with ``reader(self)`` in a task of its own, unless one runs."""
        if self.reader is None or self.reader.done():
            name = f"flo-redis-{purpose}-reader-{self.name or 'redis'}"
            self.reader = asyncio.create_task(reader(self), name=name)

    def left(self, channel: str) -> bool:
        """Whether an unsubscribe of ``channel`` Redis told of answers one of our own
        ``SUNSUBSCRIBE``s (then counted off), rather than a slot that moved."""
        if self.leaving[channel] <= 0:
            return False
        self.leaving[channel] -= 1
        if not self.leaving[channel]:
            del self.leaving[channel]
        return True

    async def close(self) -> None:
        if self.reader is not asyncio.current_task():
            await cancel_and_wait(self.reader, quiet=True)
        with contextlib.suppress(Exception):
            await self.pubsub.aclose()  # type: ignore[no-untyped-call, unused-ignore]  # typed from redis 8.2
        with contextlib.suppress(Exception):
            await self.redis.aclose()


def by_slot(channels: Iterable[tuple[str, str]]) -> list[tuple[str, list[str]]]:
    """``(route name, channel)`` pairs grouped as one command each takes them: per route
    and hash slot (a cluster refuses one ``SSUBSCRIBE`` naming channels of several
    slots), in the order first met."""
    groups: dict[tuple[str, int], list[str]] = defaultdict(list)
    for route_name, channel in channels:
        groups[(route_name, key_slot(channel.encode()))].append(channel)
    return [(route_name, group) for (route_name, _), group in groups.items()]


def subscribe_failure(exc: BaseException, purpose: str) -> BaseException:
    """What a failed ``SSUBSCRIBE`` raises: the ACL's refusal named (e.g. ``CLIENT
    SETNAME`` refused on connecting), :class:`NotConnectedError` for a lost connection
    (the caller drops the route first), else ``exc`` itself."""
    if is_denied(exc):
        return denied(f"{purpose} subscription", exc)
    # redis-py raises AttributeError ('NoneType' ... 'writelines') when the connection is
    # closed under a command it is sending: that is a lost connection too, not a fault.
    if isinstance(exc, rex.RedisError | OSError | AttributeError):
        return NotConnectedError(f"{purpose} subscription failed: {exc}")
    return exc


def node_name(conn: Redis | RedisCluster, channel: str, purpose: str) -> str:
    """The name of the node owning ``channel`` ('' on one Redis); :class:`NotConnectedError`
    when no cluster node owns it."""
    if not isinstance(conn, RedisCluster):
        return ""
    node = conn.get_node_from_key(channel)
    if node is None:
        raise NotConnectedError(f"no cluster node owns {purpose} channel {channel!r}")
    return str(node.name)


def new_route(
    conn: Redis | RedisCluster, name: str, channel: str, client_name: str | None
) -> Route:
    """A route to the node ``name`` owning ``channel``, its connection made (on first use)
    with the settings of ``conn``'s connections there, speaking RESP2 and named
    ``client_name`` when given."""
    cls: type[Any]
    if isinstance(conn, RedisCluster):
        node = conn.get_node_from_key(channel)
        assert node is not None and node.name == name
        cls, kwargs = plain_connection_class(node.connection_class), node.connection_kwargs
    else:
        main = conn.connection_pool
        cls, kwargs = main.connection_class, main.connection_kwargs
    settings = dict(kwargs)
    # RESP2: a message is a plain array, read without RESP3's push handling (server
    # maintenance notices need RESP3; a lost connection is made again).
    settings["protocol"] = 2
    settings.pop("maint_notifications_config", None)
    settings.pop("maint_notifications_pool_handler", None)
    if client_name is not None:
        settings["client_name"] = client_name
    if not isinstance(conn, RedisCluster):  # a cluster's replicas redirect
        settings["redis_connect_func"] = connect_to_primary
    return Route(name, Redis(connection_pool=ConnectionPool(connection_class=cls, **settings)))


class SlotMap:
    """Reloads a cluster's slot map in the background, one reload at a time, after a
    subscription was lost or redirected (a moved slot); does nothing on one Redis or
    once closed."""

    def __init__(
        self, connection: Callable[[], Redis | RedisCluster], purpose: str, log: logging.Logger
    ) -> None:
        self._connection = connection
        self._purpose = purpose
        self._log = log
        self._task: asyncio.Task[None] | None = None
        self.closed = False

    async def refreshed(self) -> None:
        """Wait for a reload asked for after a loss, if one is running."""
        task = self._task
        if task is not None and not task.done():
            with contextlib.suppress(Exception):
                await asyncio.shield(task)

    def refresh(self) -> None:
        """Reload the cluster's slot map (once, in the background)."""
        if self.closed:
            return
        try:
            cluster = self._connection()
        except NotConnectedError:
            return
        if not isinstance(cluster, RedisCluster):
            return
        if self._task is not None and not self._task.done():
            return

        async def reload() -> None:
            try:
                await cluster.nodes_manager.initialize()
            except Exception as exc:  # the next subscribe fails and says why
                self._log.debug("reloading the cluster slot map failed (%s)", exc)

        self._task = asyncio.create_task(reload(), name=f"flo-redis-{self._purpose}-slots")

    async def close(self) -> None:
        """Stop a reload under way; none is started until :attr:`closed` is False again."""
        self.closed = True
        await cancel_and_wait(self._task, quiet=True)
        self._task = None


async def read_route(
    route: Route,
    *,
    ping_every_s: float | None,
    reading: Callable[[], bool],
    message: Callable[[bytes, Any], None],
    other: Callable[[dict[str, Any]], None],
    refused: Callable[[rex.ResponseError], None],
    failed: Callable[[Exception], Awaitable[None]],
) -> None:
    """Read ``route``'s connection while ``reading()``: each published message straight
    off the connection to ``message(channel, data)``, then a turn of the event loop for
    what it started (a handed run); every other reply through redis-py's ``PubSub``
    bookkeeping to ``other``; an error reply to ``refused``. With ``ping_every_s`` a
    quiet connection is sent a ``PING``, and one that does not answer within as long
    counts as failed. A failed connection is handed to ``failed`` and reading ends."""
    loop = asyncio.get_running_loop()
    pubsub = route.pubsub
    conn = pubsub.connection
    if conn is None:  # not subscribed yet: nothing to read
        return
    # Replies read straight off the connection (RESP2, see new_route): a message is
    # passed on without redis-py's PubSub bookkeeping, anything else goes through it.
    read = conn.read_response
    ping = ping_every_s
    heard_at = loop.time()
    pinged_at: float | None = None
    while reading():
        try:
            if ping is not None:
                now = loop.time()
                if pinged_at is not None and now - pinged_at > ping:
                    raise rex.TimeoutError(f"no answer to PING in {ping:g} s")
                if pinged_at is None and now - heard_at >= ping:
                    await pubsub.ping()
                    pinged_at = now
            reply = await read(
                timeout=min(1.0, ping or 1.0), disconnect_on_error=False, push_request=True
            )
        except asyncio.CancelledError:
            raise
        except rex.ResponseError as exc:
            refused(exc)
            continue
        except Exception as exc:
            await failed(exc)
            return
        if reply is None:
            continue  # nothing within the timeout
        heard_at, pinged_at = loop.time(), None
        if type(reply) is list and len(reply) == 3 and reply[0] == b"smessage":
            message(reply[1], reply[2])  # the common case, read at once
            # Let what the message started (a handed run) go first.
            await asyncio.sleep(0)
            continue
        handled = await pubsub.handle_message(reply)
        if handled is not None:
            other(handled)
