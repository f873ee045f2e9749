"""Sharded pub/sub subscriptions: per-node connections, confirmed and kept standing.

Wake-ups (:mod:`flo_redis._session.wake`) and liveness (:mod:`flo_redis._session.liveness`)
each hold their sharded channels (``SSUBSCRIBE``) through a :class:`Subscriber` of their
own; what the channels mean to the scripts is in ``lua/README.md`` ("Wake-ups",
"Liveness"). A subscriber routes a channel to the primary owning its hash slot, with one
connection of its own (the client's settings) and one reader task per node
(:mod:`flo_redis._session.routes`); sends one ``SSUBSCRIBE`` per slot (a cluster
refuses several slots in one); and counts a channel as subscribed
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

Waiting for one message is a :class:`~flo_redis._session.listener.Listener` (how to use
one: :mod:`flo_redis._session.listener`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from typing import Any

import redis.exceptions as rex
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from flo_redis._aio import cancel_and_wait
from flo_redis._session import outage
from flo_redis._session.breaks import Breaks
from flo_redis._session.listener import Listener, Listeners
from flo_redis._session.routes import (
    Route,
    SlotMap,
    by_slot,
    new_route,
    node_name,
    read_route,
    subscribe_failure,
)
from flo_redis._wire.denied import denied, is_denied
from flo_redis.errors import NotConnectedError, PermissionDeniedError, is_connection_error

SUBSCRIBE_TIMEOUT_S = 5.0


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
        breaks: Breaks | None = None,
    ) -> None:
        """``connection`` returns the client's current connection: the subscriber's own
        connections are made with its settings (address, credentials, TLS, timeouts) on
        first use. ``purpose`` names tasks and log lines. The other parameters are the
        differences between the mechanisms (module docstring); ``breaks`` hears of a lost
        (or moved) connection, and of every subscription kept standing confirmed again."""
        self._connection = connection
        self._purpose = purpose
        self._log = log
        self._deliver = deliver
        self._keep = keep
        self._retry_pauses = tuple(retry_pauses)
        self._ping_every_s = ping_every_s
        self._client_name = client_name
        self._breaks = breaks or Breaks()
        self._routes: dict[str, Route] = {}
        self._state: dict[str, asyncio.Future[None]] = {}  # pending, or done: confirmed
        self._route_of: dict[str, str] = {}
        self._wanted: set[str] = set()  # with keep: made again whenever lost
        self._listeners = Listeners()
        self._lock = asyncio.Lock()
        self._closed = False
        self._slots = SlotMap(connection, purpose, log)
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
        self._slots.closed = False

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
        self._listeners.attach(listener)
        try:
            yield
        finally:
            idle = self._listeners.detach(listener)
            if release and idle and not self._closed:
                await self._unsubscribe(idle)

    def fire_all(self) -> None:
        """Wake every listener now."""
        self._listeners.fire_all()

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
            pending = [s for n in channels if (s := self._state.get(n)) and not s.done()]
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
            await self._slots.refreshed()
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
            for route_name, group in by_slot((self._route_for(n).name, n) for n in missing):
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
                    error = subscribe_failure(exc, self._purpose)
                    if isinstance(error, NotConnectedError):
                        await self._drop(route, f"{self._purpose} subscribing", exc)
                    if error is exc:
                        raise
                    raise error from exc
                route.read_by(self._read, self._purpose)

    async def _unsubscribe(self, channels: list[str]) -> None:
        """Unsubscribe ``channels`` that nobody listens to (any more)."""
        async with self._lock:
            leaving = []
            for name in channels:
                route_name = self._route_of.get(name)
                if name in self._listeners or name in self._wanted or route_name is None:
                    continue
                self._forget(name)
                leaving.append((route_name, name))
            for route_name, group in by_slot(leaving):
                route = self._routes.get(route_name)
                if route is None:
                    continue
                route.leaving.update(group)
                try:
                    await route.pubsub.sunsubscribe(*group)
                except (rex.RedisError, OSError) as exc:
                    await self._drop(route, f"{self._purpose} unsubscribing", exc)

    def _route_for(self, channel: str) -> Route:
        """The route of the node owning ``channel`` (its connection made on first use)."""
        conn = self._connection()
        name = node_name(conn, channel, self._purpose)
        route = self._routes.get(name)
        if route is None:
            route = self._routes[name] = new_route(conn, name, channel, self._client_name)
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
            self._listeners.fire(name)
        self._slots.refresh()

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
                await self._slots.refreshed()
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
                self._slots.refresh()  # the slot map may be what is stale
                self._kick.set()

    async def _read(self, route: Route) -> None:
        """Read ``route``'s connection while it is this subscriber's route to its node."""
        await read_route(
            route,
            ping_every_s=self._ping_every_s,
            reading=lambda: not self._closed and self._routes.get(route.name) is route,
            message=self._deliver_message,
            other=lambda message: self._dispatch(route, message),
            refused=lambda exc: self._refused(route, exc),
            failed=lambda exc: self._drop(route, f"{self._purpose} connection", exc),
        )

    def _refused(self, route: Route, exc: rex.ResponseError) -> None:
        """An error reply on ``route``'s connection: an ``SSUBSCRIBE`` the ACL refused is
        told to whoever waits for it, any other refusal by the ACL (a keep-alive
        ``PING``) to every later ensure(); a redirected one is made again."""
        if is_denied(exc):
            refused = [n for n in route.channels if not self.confirmed(n)]
            for name in refused:
                self._denied[name] = denied(f"SSUBSCRIBE {name}", exc)
            if not refused and self.refusal is None:
                self.refusal = denied(f"{self._purpose} connection", exc)
                self._log.error("%s", self.refusal)
            self._lost(refused)
            return
        # MOVED / ASK / TRYAGAIN for a subscribe sent on a stale slot map:
        # subscribe again where the slot lives now.
        self._log.info("%s subscription on %s redirected (%s)", self._purpose, route.name, exc)
        self._lost(n for n in route.channels if not self.confirmed(n))

    def _deliver_message(self, channel: bytes, data: Any) -> None:
        """A message published on ``channel``: to its listeners, in the order they came."""
        name = channel.decode()
        if not self._deliver:
            self._log.warning("unexpected message on %s channel %s", self._purpose, name)
            return
        self._listeners.fire(name, data if isinstance(data, bytes) else None)

    def _dispatch(self, route: Route, message: dict[str, Any]) -> None:
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
                if self._breaks.broken and all(map(self.confirmed, self._wanted)):
                    self._breaks.ended()
        elif kind == "sunsubscribe":
            if route.left(name) or self._route_of.get(name) != route.name:
                return  # the answer to our own unsubscribe, or not this route's
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
            where = f"{self._purpose} subscriptions on {route.name or 'redis'}"
            self._log.warning("%s: Redis there is now a replica; subscribing again", where)
            self._breaks.began()
            await self._drop(route)

    async def _drop(
        self, route: Route, what: str | None = None, cause: BaseException | None = None
    ) -> None:
        """Forget a node's connection and its subscriptions, which are made again (by the
        keeper, or by listeners woken to arm again); ``what`` failed with ``cause``."""
        if self._routes.get(route.name) is not route:
            return
        if not self._closed and what is not None and cause is not None:
            outage.failed(self._log, self._connection, what, cause)
            self._breaks.began()
        del self._routes[route.name]
        self._lost(n for n in list(route.channels) if self._route_of.get(n) == route.name)
        route.channels.clear()
        await route.close()

    async def close(self) -> None:
        """Drop every subscription and connection; :meth:`ensure` then refuses."""
        self._closed = True
        self._wanted.clear()
        self.fire_all()
        await cancel_and_wait(self._keeper, quiet=True)
        self._keeper = None
        await self._slots.close()
        routes, self._routes = list(self._routes.values()), {}
        for state in self._state.values():
            if not state.done():
                state.cancel()
        self._state.clear()
        self._route_of.clear()
        for route in routes:
            await route.close()
