"""Sharded pub/sub subscriptions: per-node connections, confirmed and kept standing.

Wake-ups (:mod:`flo_redis._session.wake`) and liveness
(:mod:`flo_redis._session.liveness`) each hold their
sharded channels (``SSUBSCRIBE``) through a :class:`Subscriber` of their own; what the
channels mean to the scripts is in ``lua/README.md`` ("Wake-ups", "Liveness"). A
subscriber routes a channel to the primary owning its hash slot, with one connection of
its own (the client's settings) and one reader task per node; sends one ``SSUBSCRIBE``
per slot (a cluster refuses several slots in one); and counts a channel as subscribed
once Redis confirmed it. A subscription lost — connection dropped, slot moved (Redis
unsubscribes it), subscribe redirected (``MOVED``/``TRYAGAIN``) — is made again where the
slot lives now, after reloading the slot map; all of them after a call of the client was
answered by a replica (:meth:`Subscriber.move`: a failover made their node one). The
users' real differences are named parameters:

- ``deliver``: wake-ups hand each message to the listeners of its channel; liveness
  expects none (nothing is ever published on a liveness channel).
- ``keep``: liveness subscribes again at once, in the background (nobody else asks, and
  a live owner must be back within the reclaim grace); wake-ups subscribe again when a
  listener next arms, and a loss wakes the lost channels' listeners so that is at once.
- ``retry_pauses``: how subscribing again backs off while it fails.
- ``ping_every_s``: liveness ``PING``s a quiet connection (a partition sends no reset,
  and a silently dead connection would hide a live owner); a poller that misses a
  wake-up still wakes at its deadline, so wake-ups do not.
- ``client_name``: liveness names its connections (``CLIENT LIST`` shows them).

Never give both one subscriber: a frozen process whose liveness connection filled with
wake-ups would be disconnected by Redis for its output buffer — a false death.

A subscriber's connections speak RESP2, and its reader takes each reply straight off
the connection: a published message goes to its channel's listeners at once, in the
order they were attached (a poller's hand-off inbox, attached first, starts a handed run
before the poll's watch is woken), and the reader then lets what it started run before
reading on; other replies (subscribe confirmations, unsubscribes, pongs) go through
redis-py's ``PubSub`` bookkeeping.

Waiting for one message (e.g. a script publishing that a run ended) is a
:class:`Listener` on the client's ``waker``. Arm it *before* reading the state the
message is about, so a message published in between is never missed; ``release=True``
unsubscribes the channel when its last listener leaves (one-off channels; a queue's wake
channel stays subscribed for the next poll)::

    async with waker.listening([channel], release=True) as listener:
        while True:
            await listener.arm()  # forget what was heard; subscribed and confirmed
            if (state := await read_state()) is finished:
                return state
            remaining = deadline - loop.time()
            if remaining <= 0 or not await listener.wait(remaining):
                return None  # deadline
            # woken by a message (payload: listener.message) or by a lost
            # subscription (the next arm makes it again): read the state again

A wake-up may be spurious, so the state read after it, not the message, decides.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from typing import Any

import redis.exceptions as rex
from redis.asyncio import ConnectionPool, Redis
from redis.asyncio.client import PubSub
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.connection import AbstractConnection
from redis.crc import key_slot

from flo_redis._session import outage
from flo_redis._session.aio import cancel_and_wait
from flo_redis._session.endpoint import plain_connection_class
from flo_redis._session.listener import Listener
from flo_redis._wire.denied import denied, is_denied
from flo_redis.errors import NotConnectedError, PermissionDeniedError, is_connection_error

SUBSCRIBE_TIMEOUT_S = 5.0


async def _connect_to_primary(conn: AbstractConnection) -> None:
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


class _Route:
    """The subscriptions held on one Redis node: a connection and the task reading it."""

    def __init__(self, name: str, redis: Redis) -> None:
        self.name = name
        self.redis = redis
        self.pubsub: PubSub = redis.pubsub()
        self.reader: asyncio.Task[None] | None = None
        self.channels: set[str] = set()  # subscribed, or subscription sent
        self.leaving: Counter[str] = Counter()  # our own SUNSUBSCRIBEs not answered yet

    async def close(self) -> None:
        if self.reader is not asyncio.current_task():
            await cancel_and_wait(self.reader, quiet=True)
        with contextlib.suppress(Exception):
            await self.pubsub.aclose()  # type: ignore[no-untyped-call, unused-ignore]  # typed from redis 8.2
        with contextlib.suppress(Exception):
            await self.redis.aclose()


class Subscriber:
    """One mechanism's sharded subscriptions, on connections of its own."""

    def __init__(
        self,
        connection: Callable[[], Redis | RedisCluster],
        *,
        purpose: str,
        log: logging.Logger,
        deliver: bool,
        keep: bool,
        retry_pauses: Sequence[float],
        ping_every_s: float | None = None,
        client_name: str | None = None,
    ) -> None:
        """``connection`` returns the client's current connection: the subscriber's own
        connections are made with its settings (address, credentials, TLS, timeouts) on
        first use. ``purpose`` names tasks and log lines. The other parameters are the
        differences between the mechanisms (module docstring)."""
        self._connection = connection
        self._purpose = purpose
        self._log = log
        self._deliver = deliver
        self._keep = keep
        self._retry_pauses = tuple(retry_pauses)
        self._ping_every_s = ping_every_s
        self._client_name = client_name
        self._routes: dict[str, _Route] = {}
        self._state: dict[str, asyncio.Future[None]] = {}  # pending, or done: confirmed
        self._route_of: dict[str, str] = {}
        self._wanted: set[str] = set()  # with keep: made again whenever lost
        # channel -> its listeners, in the order they were attached (told in that order)
        self._listeners: dict[str, dict[Listener, None]] = {}
        self._lock = asyncio.Lock()
        self._closed = False
        self._refresh: asyncio.Task[None] | None = None
        self._keeper: asyncio.Task[None] | None = None
        self._kick = asyncio.Event()
        self._denied: dict[str, PermissionDeniedError] = {}  # SSUBSCRIBEs the ACL refused
        self.refusal: PermissionDeniedError | None = None  # e.g. a PING; ensure() raises it

    @property
    def wanted(self) -> frozenset[str]:
        """The channels kept standing (with ``keep``): held, or being subscribed again."""
        return frozenset(self._wanted)

    def confirmed(self, channel: str) -> bool:
        """Whether Redis confirmed the subscription to ``channel`` and it still stands."""
        state = self._state.get(channel)
        return state is not None and state.done() and not state.cancelled()

    def reopen(self) -> None:
        """Take subscriptions again after :meth:`close`."""
        self._closed = False

    # --- listening -------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def listening(
        self, channels: Iterable[str], *, release: bool = False
    ) -> AsyncIterator[Listener]:
        """A :class:`Listener` on ``channels`` (subscribed by its first ``arm``); with
        ``release`` a channel is unsubscribed when its last listener leaves."""
        listener = Listener(self.ensure, list(dict.fromkeys(channels)))
        async with self.attached(listener, release=release):
            yield listener

    @contextlib.asynccontextmanager
    async def attached(self, listener: Listener, *, release: bool = False) -> AsyncIterator[None]:
        """Deliver the messages of ``listener.channels`` to ``listener`` while inside."""
        if not self._deliver:
            raise TypeError(f"{self._purpose} subscriptions carry no messages to listen to")
        for name in listener.channels:
            self._listeners.setdefault(name, {})[listener] = None
        try:
            yield
        finally:
            idle = []
            for name in listener.channels:
                listeners = self._listeners.get(name)
                if listeners is not None:
                    listeners.pop(listener, None)
                    if not listeners:
                        del self._listeners[name]
                        idle.append(name)
            if release and idle and not self._closed:
                await self._unsubscribe(idle)

    def fire_all(self) -> None:
        """Wake every listener now."""
        for listeners in self._listeners.values():
            for listener in listeners:
                listener.fire()

    # --- subscribing -----------------------------------------------------------------

    async def ensure(self, channels: Sequence[str]) -> None:
        """Return once every channel of ``channels`` is confirmed subscribed on the node
        that owns it. :class:`NotConnectedError` at once when Redis cannot be reached,
        or when the confirmation takes longer than 5 s (with ``keep`` the channels are
        then still made again in the background)."""
        if self.refusal is not None:
            raise self.refusal
        if all(self.confirmed(n) for n in channels):
            return
        if self._closed:
            raise NotConnectedError("the client is closed")
        if self._keep:
            self._wanted.update(channels)
            if self._keeper is None or self._keeper.done():
                self._keeper = asyncio.create_task(
                    self._keep_standing(), name=f"flo-redis-{self._purpose}-keeper"
                )
        loop = asyncio.get_running_loop()
        deadline = loop.time() + SUBSCRIBE_TIMEOUT_S
        attempt = 0
        while True:
            if self._closed:
                raise NotConnectedError("the client is closed")
            await self._subscribe_missing(channels)
            pending = [
                s for n in channels if (s := self._state.get(n)) is not None and not s.done()
            ]
            remaining = deadline - loop.time()
            if pending and remaining > 0:
                await asyncio.wait(pending, timeout=remaining)
            if refusal := next((self._denied.pop(n) for n in channels if n in self._denied), None):
                raise refusal
            if all(self.confirmed(n) for n in channels):
                return
            if loop.time() >= deadline:
                raise NotConnectedError(
                    f"{self._purpose} subscription to {channels[0]!r} not confirmed within "
                    f"{SUBSCRIBE_TIMEOUT_S:g} s"
                )
            await self._refreshed()
            await asyncio.sleep(self._pause(attempt))
            attempt += 1

    def _pause(self, attempt: int) -> float:
        return self._retry_pauses[min(attempt, len(self._retry_pauses) - 1)]

    async def _subscribe_missing(self, channels: Iterable[str]) -> None:
        """Subscribe every channel of ``channels`` neither confirmed nor pending, each on
        the node owning its slot."""
        async with self._lock:
            missing = sorted({n for n in channels if n not in self._state})
            if not missing:
                return
            loop = asyncio.get_running_loop()
            groups: dict[tuple[str, int], list[str]] = defaultdict(list)
            for name in missing:
                route = self._route_for(name)
                # A cluster refuses one SSUBSCRIBE naming channels of several slots.
                groups[(route.name, key_slot(name.encode()))].append(name)
            for (route_name, _), group in groups.items():
                route = self._routes[route_name]
                for name in group:
                    self._state[name] = loop.create_future()
                    self._route_of[name] = route_name
                    route.channels.add(name)
                try:
                    await route.pubsub.ssubscribe(*group)
                except BaseException as exc:
                    for name in group:
                        self._forget(name)
                    if is_denied(exc):  # e.g. CLIENT SETNAME refused on connecting
                        raise denied(f"{self._purpose} subscription", exc) from exc
                    # redis-py raises AttributeError ('NoneType' ... 'writelines') when
                    # the connection is closed under a command it is sending: that is a
                    # lost connection too, not a fault of ours.
                    if isinstance(exc, rex.RedisError | OSError | AttributeError):
                        await self._drop(route, f"{self._purpose} subscribing", exc)
                        raise NotConnectedError(
                            f"{self._purpose} subscription failed: {exc}"
                        ) from exc
                    raise
                if route.reader is None or route.reader.done():
                    route.reader = asyncio.create_task(
                        self._read(route),
                        name=f"flo-redis-{self._purpose}-reader-{route_name or 'redis'}",
                    )

    async def _unsubscribe(self, channels: list[str]) -> None:
        """Unsubscribe ``channels`` that nobody listens to (any more)."""
        async with self._lock:
            groups: dict[tuple[str, int], list[str]] = defaultdict(list)
            for name in channels:
                route_name = self._route_of.get(name)
                if name in self._listeners or name in self._wanted or route_name is None:
                    continue
                self._forget(name)
                groups[(route_name, key_slot(name.encode()))].append(name)
            for (route_name, _), group in groups.items():
                route = self._routes.get(route_name)
                if route is None:
                    continue
                route.leaving.update(group)
                try:
                    await route.pubsub.sunsubscribe(*group)
                except (rex.RedisError, OSError) as exc:
                    await self._drop(route, f"{self._purpose} unsubscribing", exc)

    def _route_for(self, channel: str) -> _Route:
        """The route of the node owning ``channel`` (its connection made on first use)."""
        conn = self._connection()
        cls: type[Any]
        if isinstance(conn, RedisCluster):
            node = conn.get_node_from_key(channel)
            if node is None:
                raise NotConnectedError(f"no cluster node owns {self._purpose} channel {channel!r}")
            name, cls, kwargs = node.name, node.connection_class, node.connection_kwargs
            cls = plain_connection_class(cls)
        else:
            main = conn.connection_pool
            name, cls, kwargs = "", main.connection_class, main.connection_kwargs
        route = self._routes.get(name)
        if route is None:
            settings = dict(kwargs)
            # RESP2: a message is a plain array, read without RESP3's push handling
            # (server maintenance notices need RESP3; a lost connection is made again).
            settings["protocol"] = 2
            settings.pop("maint_notifications_config", None)
            settings.pop("maint_notifications_pool_handler", None)
            if self._client_name is not None:
                settings["client_name"] = self._client_name
            if not isinstance(conn, RedisCluster):  # a cluster's replicas redirect
                settings["redis_connect_func"] = _connect_to_primary
            route = _Route(
                name, Redis(connection_pool=ConnectionPool(connection_class=cls, **settings))
            )
            self._routes[name] = route
        return route

    def _forget(self, name: str) -> None:
        """``name`` is no longer subscribed (nor pending)."""
        state = self._state.pop(name, None)
        if state is not None and not state.done():
            state.cancel()
        route_name = self._route_of.pop(name, None)
        route = self._routes.get(route_name) if route_name is not None else None
        if route is not None:
            route.channels.discard(name)
        if self._keep:
            self._kick.set()

    def _lost(self, names: Iterable[str]) -> None:
        """Subscriptions Redis no longer holds: forget them, wake their listeners (who
        subscribe again when they arm), and reload the slot map."""
        for name in list(names):
            self._forget(name)
            for listener in self._listeners.get(name, ()):
                listener.fire()
        self._refresh_slots()

    async def _keep_standing(self) -> None:
        """With ``keep``: subscribe again whatever was lost, at once, then backing off
        while it fails."""
        failures = 0
        while not self._closed:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._kick.wait(), 1.0)
            self._kick.clear()
            if self._closed or all(c in self._state for c in self._wanted):
                continue
            await asyncio.sleep(self._pause(failures))
            try:
                await self._refreshed()
                await self._subscribe_missing(self._wanted)
                failures = 0
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                failures += 1
                if is_connection_error(exc):
                    outage.failed(self._log, self._connection, self._purpose, exc)
                elif failures == 1 or failures % 40 == 0:  # not 4 lines a second
                    self._log.warning("%s: subscribing again failed (%s)", self._purpose, exc)
                self._refresh_slots()  # the slot map may be what is stale
                self._kick.set()

    async def _refreshed(self) -> None:
        """Wait for a slot-map reload asked for after a loss, if one is running."""
        task = self._refresh
        if task is not None and not task.done():
            with contextlib.suppress(Exception):
                await asyncio.shield(task)

    def _refresh_slots(self) -> None:
        """Reload the cluster's slot map (once, in the background)."""
        if self._closed:
            return
        try:
            cluster = self._connection()
        except NotConnectedError:
            return
        if not isinstance(cluster, RedisCluster):
            return
        if self._refresh is not None and not self._refresh.done():
            return

        async def refresh() -> None:
            try:
                await cluster.nodes_manager.initialize()
            except Exception as exc:  # the next subscribe fails and says why
                self._log.debug("reloading the cluster slot map failed (%s)", exc)

        self._refresh = asyncio.create_task(refresh(), name=f"flo-redis-{self._purpose}-slots")

    # --- reading ---------------------------------------------------------------------

    async def _read(self, route: _Route) -> None:
        loop = asyncio.get_running_loop()
        pubsub = route.pubsub
        conn = pubsub.connection
        if conn is None:  # not subscribed yet: nothing to read
            return
        # Replies read straight off the connection (RESP2, see _route_for): a message is
        # passed on without redis-py's PubSub bookkeeping, anything else goes through it.
        read = conn.read_response
        ping = self._ping_every_s
        heard_at = loop.time()
        pinged_at: float | None = None
        while not self._closed and self._routes.get(route.name) is route:
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
                if is_denied(exc):
                    # An SSUBSCRIBE refused by the ACL is told to whoever waits for it;
                    # anything else (a keep-alive PING) to every later ensure().
                    refused = [n for n in route.channels if not self.confirmed(n)]
                    for name in refused:
                        self._denied[name] = denied(f"SSUBSCRIBE {name}", exc)
                    if not refused and self.refusal is None:
                        self.refusal = denied(f"{self._purpose} connection", exc)
                        self._log.error("%s", self.refusal)
                    self._lost(refused)
                    continue
                # MOVED / ASK / TRYAGAIN for a subscribe sent on a stale slot map:
                # subscribe again where the slot lives now.
                self._log.info(
                    "%s subscription on %s redirected (%s)", self._purpose, route.name, exc
                )
                self._lost(n for n in route.channels if not self.confirmed(n))
                continue
            except Exception as exc:
                await self._drop(route, f"{self._purpose} connection", exc)
                return
            if reply is None:
                continue  # nothing within the timeout
            heard_at, pinged_at = loop.time(), None
            if type(reply) is list and len(reply) == 3 and reply[0] == b"smessage":
                self._deliver_message(reply[1], reply[2])  # the common case, read at once
                # Let what the message started (a handed run) go first.
                await asyncio.sleep(0)
                continue
            message = await pubsub.handle_message(reply)
            if message is not None:
                self._dispatch(route, message)

    def _deliver_message(self, channel: bytes, data: Any) -> None:
        """A message published on ``channel``: to its listeners, in the order they came."""
        name = channel.decode()
        if not self._deliver:
            self._log.warning("unexpected message on %s channel %s", self._purpose, name)
            return
        for listener in self._listeners.get(name, ()):
            listener.fire(data if isinstance(data, bytes) else None)

    def _dispatch(self, route: _Route, message: dict[str, Any]) -> None:
        kind = message.get("type")
        channel = message.get("channel")
        name = channel.decode() if isinstance(channel, bytes) else str(channel)
        if kind == "smessage":
            self._deliver_message(name.encode(), message.get("data"))
        elif kind == "ssubscribe":
            state = self._state.get(name)
            if state is not None and not state.done() and self._route_of.get(name) == route.name:
                state.set_result(None)
                outage.reached(self._log, self._connection)
        elif kind == "sunsubscribe":
            if route.leaving[name] > 0:  # the answer to our own unsubscribe
                route.leaving[name] -= 1
                if not route.leaving[name]:
                    del route.leaving[name]
                return
            if self._route_of.get(name) != route.name:
                return
            # The server dropped the subscription (the slot moved): take it again.
            why = f"{self._purpose} channel {name} unsubscribed by {route.name or 'redis'}"
            self._log.warning("%s (slot moved); subscribing again", why)
            with contextlib.suppress(Exception):
                route.pubsub.shard_channels.pop(channel, None)
            self._lost([name])

    async def move(self) -> None:
        """Make every connection again, and every subscription on it: the node they are
        on answered as a replica (a failover), where the primary counts none of them."""
        for route in list(self._routes.values()):
            self._log.warning(
                "%s subscriptions on %s: Redis there is now a replica; subscribing again",
                self._purpose,
                route.name or "redis",
            )
            await self._drop(route)

    async def _drop(
        self, route: _Route, what: str | None = None, cause: BaseException | None = None
    ) -> None:
        """Forget a node's connection and its subscriptions, which are made again (by the
        keeper, or by listeners woken to arm again); ``what`` failed with ``cause``."""
        if self._routes.get(route.name) is not route:
            return
        if not self._closed and what is not None and cause is not None:
            outage.failed(self._log, self._connection, what, cause)
        del self._routes[route.name]
        self._lost(n for n in list(route.channels) if self._route_of.get(n) == route.name)
        route.channels.clear()
        await route.close()

    async def close(self) -> None:
        """Drop every subscription and connection; :meth:`ensure` then refuses."""
        self._closed = True
        self._wanted.clear()
        self.fire_all()
        await cancel_and_wait(self._keeper, self._refresh, quiet=True)
        self._keeper = self._refresh = None
        routes, self._routes = list(self._routes.values()), {}
        for state in self._state.values():
            if not state.done():
                state.cancel()
        self._state.clear()
        self._route_of.clear()
        for route in routes:
            await route.close()


__all__ = ["SUBSCRIBE_TIMEOUT_S", "Listener", "Subscriber"]
