"""Wake-ups: idle pollers sleep until a script announces work, not on a polling interval.

Scripts that make work available (invoke, append, nack, retry, reclaim) ``SPUBLISH`` on
the queue's wake channel. Each client keeps one pub/sub connection per Redis node for wake
channels (never the liveness connection: a frozen process whose liveness connection
filled with messages would be disconnected — a false death). A poller *first* registers
interest and waits for the subscription to be confirmed, *then* runs its claim, then
sleeps: a wake-up published between "nothing to claim" and "start waiting" is therefore
never missed.

On Redis Cluster a channel is subscribed on the primary that owns its hash slot, each
node's subscriptions on their own connection with their own reader task, so a wake-up
from any node is seen at once. When a slot moves (resharding, failover) Redis drops its
shard subscribers: the channel is marked unsubscribed and every poller is woken, and its
next :meth:`Watch.arm` subscribes again on the slot's new owner. A subscribe answered by
``MOVED``/``TRYAGAIN`` refreshes the cluster's slot map and is retried.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import defaultdict
from collections.abc import AsyncIterator, Iterable
from typing import Any

import redis.exceptions as rex
from redis.asyncio import ConnectionPool, Redis
from redis.asyncio.client import PubSub
from redis.asyncio.cluster import RedisCluster
from redis.crc import key_slot

from .errors import NotConnectedError

log = logging.getLogger("flo_redis.wake")

_SUBSCRIBE_TIMEOUT_S = 5.0
_RETRY_PAUSE_S = (0.0, 0.02, 0.05, 0.1, 0.2, 0.5)


def raise_if_cancelling() -> None:
    """Re-raise a cancellation that a library swallowed.

    ``asyncio.wait_for`` on Python 3.11 (used inside redis-py for socket writes) can
    drop a cancellation that arrives as its inner call completes; the task then stays
    marked as cancelling. Long-running loops call this before they wait again, so a
    cancelled worker never keeps polling.
    """
    task = asyncio.current_task()
    cancelling = getattr(task, "cancelling", None)
    if cancelling is not None and cancelling():
        raise asyncio.CancelledError()


class Watch:
    """Interest in a set of wake channels; ``wait`` returns on a wake-up or the deadline."""

    def __init__(self, waker: Waker, channels: list[str]) -> None:
        self._waker = waker
        self._channels = channels
        self._event = asyncio.Event()
        self._generation = waker.generation

    @property
    def interrupted(self) -> bool:
        """True once :meth:`Waker.interrupt` was called after this watch began."""
        return self._waker.generation != self._generation

    async def arm(self) -> None:
        """Forget wake-ups seen so far and make sure the subscriptions stand (after a
        lost connection or a moved slot they are made again); call before each claim."""
        self._event.clear()
        await self._waker._ensure_subscribed(self._channels)

    def fire(self) -> None:
        self._event.set()

    async def wait(self, timeout_s: float) -> bool:
        """True if woken before ``timeout_s`` passed (spurious wake-ups are possible)."""
        raise_if_cancelling()
        if timeout_s <= 0 or self._event.is_set():
            return self._event.is_set()
        # asyncio.wait, not wait_for: a cancellation arriving with the wake-up must
        # never be swallowed.
        waiter = asyncio.ensure_future(self._event.wait())
        try:
            done, _ = await asyncio.wait({waiter}, timeout=timeout_s)
        finally:
            waiter.cancel()
        return bool(done)


class _Route:
    """The wake subscriptions held on one Redis node: a pub/sub connection and the task
    reading it."""

    def __init__(self, name: str, redis: Redis, owns_redis: bool) -> None:
        self.name = name
        self.redis = redis
        self.owns_redis = owns_redis
        self.pubsub: PubSub = redis.pubsub()
        self.reader: asyncio.Task[None] | None = None
        self.channels: set[str] = set()  # subscribed, or subscription sent

    async def close(self) -> None:
        if self.reader is not None and self.reader is not asyncio.current_task():
            self.reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self.reader
        with contextlib.suppress(Exception):
            await self.pubsub.aclose()  # type: ignore[no-untyped-call]
        if self.owns_redis:
            with contextlib.suppress(Exception):
                await self.redis.aclose()


class Waker:
    """One client's wake-channel subscriptions, shared by all of its pollers."""

    def __init__(self, redis: Redis | RedisCluster) -> None:
        self._redis = redis
        self._routes: dict[str, _Route] = {}
        # channel -> subscription outcome: pending, True (confirmed) or False (retry)
        self._state: dict[str, asyncio.Future[bool]] = {}
        self._route_of: dict[str, str] = {}
        self._watches: dict[str, set[Watch]] = {}
        self._lock = asyncio.Lock()
        self._closed = False
        self._refresh: asyncio.Task[None] | None = None
        self.generation = 0

    @contextlib.asynccontextmanager
    async def watching(self, channels: Iterable[str]) -> AsyncIterator[Watch]:
        """Subscribe (if needed) to ``channels`` and yield a :class:`Watch` on them."""
        names = list(dict.fromkeys(channels))
        watch = Watch(self, names)
        for name in names:
            self._watches.setdefault(name, set()).add(watch)
        try:
            yield watch
        finally:
            for name in names:
                watchers = self._watches.get(name)
                if watchers is not None:
                    watchers.discard(watch)

    def interrupt(self) -> None:
        """End every waiting poll now: each makes one last claim and returns."""
        self.generation += 1
        self._wake_all()

    def _wake_all(self) -> None:
        for watchers in self._watches.values():
            for watch in watchers:
                watch.fire()

    # --- subscribing -----------------------------------------------------------------

    def _needs_subscribe(self, name: str) -> bool:
        state = self._state.get(name)
        return state is None or (state.done() and not state.result())

    async def _ensure_subscribed(self, names: list[str]) -> None:
        """Return once every channel of ``names`` is confirmed subscribed on the node that
        owns it; :class:`NotConnectedError` when that takes longer than 5 s."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + _SUBSCRIBE_TIMEOUT_S
        attempt = 0
        while True:
            if self._closed:
                raise NotConnectedError("the client is closed")
            if any(self._needs_subscribe(n) for n in names):
                async with self._lock:
                    missing = [n for n in names if self._needs_subscribe(n)]
                    if missing:
                        await self._subscribe(missing)
            pending = [self._state[n] for n in names if not self._state[n].done()]
            remaining = deadline - loop.time()
            if pending and remaining > 0:
                await asyncio.wait(pending, timeout=remaining)
            if all(self._state[n].done() and self._state[n].result() for n in names):
                return
            if loop.time() >= deadline:
                raise NotConnectedError(
                    f"wake subscription to {names[0]!r} not confirmed within "
                    f"{_SUBSCRIBE_TIMEOUT_S:g} s"
                )
            await self._refreshed()
            await asyncio.sleep(_RETRY_PAUSE_S[min(attempt, len(_RETRY_PAUSE_S) - 1)])
            attempt += 1

    async def _subscribe(self, names: list[str]) -> None:
        loop = asyncio.get_running_loop()
        groups: dict[tuple[str, int], list[str]] = defaultdict(list)
        for name in names:
            route = self._route_for(name)
            # A cluster refuses one SSUBSCRIBE naming channels of several slots.
            groups[(route.name, key_slot(name.encode()))].append(name)
        for (route_name, _), group in groups.items():
            route = self._routes[route_name]
            for name in group:
                previous = self._route_of.get(name)
                if previous is not None and previous != route_name and previous in self._routes:
                    self._routes[previous].channels.discard(name)
                self._state[name] = loop.create_future()
                self._route_of[name] = route_name
                route.channels.add(name)
            try:
                await route.pubsub.ssubscribe(*group)
            except BaseException as exc:
                for name in group:
                    self._settle(name, False)
                if isinstance(exc, rex.ConnectionError | rex.TimeoutError | OSError):
                    await self._drop(route, f"subscribe failed ({exc})")
                    raise NotConnectedError(f"wake subscription failed: {exc}") from exc
                raise
            if route.reader is None or route.reader.done():
                route.reader = asyncio.create_task(
                    self._read(route), name=f"flo-redis-wake-reader-{route_name or 'redis'}"
                )

    def _route_for(self, channel: str) -> _Route:
        """The route of the node owning ``channel`` (made on first use)."""
        if isinstance(self._redis, RedisCluster):
            node = self._redis.get_node_from_key(channel)
            if node is None:
                raise NotConnectedError(f"no cluster node owns wake channel {channel!r}")
            route = self._routes.get(node.name)
            if route is None:
                pool = ConnectionPool(
                    connection_class=node.connection_class, **node.connection_kwargs
                )
                route = _Route(node.name, Redis(connection_pool=pool), owns_redis=True)
                self._routes[node.name] = route
            return route
        route = self._routes.get("")
        if route is None:
            route = _Route("", self._redis, owns_redis=False)
            self._routes[""] = route
        return route

    def _settle(self, name: str, ok: bool) -> None:
        state = self._state.get(name)
        if state is None or state.done():
            self._state[name] = fut = asyncio.get_running_loop().create_future()
            fut.set_result(ok)
        else:
            state.set_result(ok)

    async def _refreshed(self) -> None:
        """Wait for a slot-map refresh asked for by a reader, if one is running."""
        task = self._refresh
        if task is not None and not task.done():
            with contextlib.suppress(Exception):
                await asyncio.shield(task)

    def _refresh_slots(self) -> None:
        """Reload the cluster's slot map (once, in the background) after a redirect."""
        cluster = self._redis
        if not isinstance(cluster, RedisCluster):
            return
        if self._refresh is not None and not self._refresh.done():
            return

        async def refresh() -> None:
            try:
                await cluster.nodes_manager.initialize()
            except Exception as exc:
                log.warning("reloading the cluster slot map failed (%s)", exc)

        self._refresh = asyncio.create_task(refresh(), name="flo-redis-wake-slots")

    # --- reading -----------------------------------------------------------------------

    async def _read(self, route: _Route) -> None:
        pubsub = route.pubsub
        while not self._closed and self._routes.get(route.name) is route:
            try:
                if not pubsub.subscribed:
                    await asyncio.sleep(0.01)
                    continue
                message = await pubsub.get_message(timeout=1.0)
            except asyncio.CancelledError:
                raise
            except (rex.ConnectionError, rex.TimeoutError, OSError) as exc:
                await self._drop(route, f"wake connection lost ({exc})")
                return
            except rex.ResponseError as exc:
                # MOVED / ASK / TRYAGAIN for a subscribe sent on a stale slot map: reload
                # it and let the pollers subscribe again where the slot lives now.
                log.info("wake subscription on %s redirected (%s)", route.name or "redis", exc)
                for name in list(route.channels):
                    state = self._state.get(name)
                    if state is not None and not state.done():
                        route.channels.discard(name)
                        self._settle(name, False)
                self._refresh_slots()
                continue
            if message is not None:
                self._dispatch(route, message)

    def _dispatch(self, route: _Route, message: dict[str, Any]) -> None:
        kind = message.get("type")
        channel = message.get("channel")
        name = channel.decode() if isinstance(channel, bytes) else str(channel)
        if kind == "ssubscribe":
            if self._route_of.get(name) == route.name:
                self._settle(name, True)
        elif kind == "smessage":
            for watch in self._watches.get(name, ()):
                watch.fire()
        elif kind == "sunsubscribe":
            # The server dropped us (the slot moved): subscribe again where it lives
            # now, and wake everyone so that happens at once.
            log.info("wake channel %s unsubscribed by %s (slot moved)", name, route.name)
            route.channels.discard(name)
            if self._route_of.get(name) == route.name:
                self._route_of.pop(name, None)
                self._settle(name, False)
            with contextlib.suppress(Exception):
                route.pubsub.shard_channels.pop(channel, None)
            self._refresh_slots()
            self._wake_all()

    async def _drop(self, route: _Route, why: str) -> None:
        """After a lost connection: forget the node's subscriptions and wake everyone;
        each poller's next :meth:`Watch.arm` subscribes again on a new connection."""
        if self._routes.get(route.name) is not route:
            return
        log.warning("%s; pollers will subscribe again", why)
        del self._routes[route.name]
        for name in route.channels:
            if self._route_of.get(name) == route.name:
                self._route_of.pop(name, None)
                self._settle(name, False)
        route.channels.clear()
        self._refresh_slots()
        self._wake_all()
        await route.close()

    async def close(self) -> None:
        self._closed = True
        self.interrupt()
        routes, self._routes = list(self._routes.values()), {}
        for route in routes:
            await route.close()
        for state in self._state.values():
            if not state.done():
                state.set_result(False)
        if self._refresh is not None:
            self._refresh.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._refresh
            self._refresh = None
