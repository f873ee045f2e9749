"""Owner liveness: how Redis can tell that a worker process is gone.

Each client that takes work is an *owner* (``client.owner_id``) and keeps a dedicated
pub/sub connection, :class:`Liveness`, that only holds sharded subscriptions
(``SSUBSCRIBE``) to its owner channel in every hash slot it takes work in — subscribed
before its first claim there — and never receives a message. When the process dies,
Redis drops the connection and the channel's subscriber count falls to 0; the reclaim
scripts (:mod:`flo_redis.reclaim`) read that count with ``PUBSUB SHARDNUMSUB``.

On Redis Cluster a channel is subscribed on the primary that owns its slot: one
liveness connection per node, each named ``flo-live:<owner>`` (``CLIENT LIST``).
Nothing is ever published on a liveness channel, and wake-ups ride another connection:
a frozen process whose liveness connection filled with messages would be disconnected
by Redis for its output buffer — a false death.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import redis.exceptions as rex
from redis.asyncio import ConnectionPool, Redis
from redis.asyncio.client import PubSub
from redis.asyncio.cluster import RedisCluster
from redis.crc import key_slot

from .errors import NotConnectedError
from .keys import check_name, owner_channel

log = logging.getLogger("flo_redis.liveness")

DEFAULT_GRACE_MS = 1000
"""How long an owner must stay without its liveness subscription before its work is
taken back: long enough for a live process to resubscribe after a connection blip."""

_SUBSCRIBE_TIMEOUT_S = 5.0
_PING_EVERY_S = 5.0
# Subscribing again backs off only to a quarter of the default grace: after a Redis
# restart or failover a live owner must be back before others judge it gone.
_RETRY_PAUSE_S = (0.0, 0.02, 0.05, 0.1, 0.2, 0.25)
_NAME_CHARS = re.compile(r"[^A-Za-z0-9._:-]")


def connection_name(owner: str) -> str:
    """The ``CLIENT SETNAME`` of ``owner``'s liveness connections."""
    return "flo-live:" + _NAME_CHARS.sub("_", owner)


class _Route:
    """The liveness subscriptions held on one Redis node: a connection and its reader."""

    def __init__(self, name: str, redis: Redis) -> None:
        self.name = name
        self.redis = redis
        self.pubsub: PubSub = redis.pubsub()
        self.reader: asyncio.Task[None] | None = None
        self.channels: set[str] = set()

    async def close(self) -> None:
        if self.reader is not None and self.reader is not asyncio.current_task():
            self.reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self.reader
        with contextlib.suppress(Exception):
            await self.pubsub.aclose()  # type: ignore[no-untyped-call]
        with contextlib.suppress(Exception):
            await self.redis.aclose()


class Liveness:
    """One owner's liveness subscriptions: its owner channel in every hash slot it works
    in, kept standing across lost connections, slot moves and silent partitions.

    After an unexpected unsubscribe or a lost connection the subscription is made again at
    once (then every 250 ms at most while Redis is unreachable), so a live process is
    back well within the reclaim grace. A connection gone silent (a partition sends no
    reset) is noticed by a ``PING`` left unanswered for ``ping_every_s``.
    """

    def __init__(
        self,
        owner: str,
        connection: Callable[[], Redis | RedisCluster],
        *,
        ping_every_s: float = _PING_EVERY_S,
    ) -> None:
        """``connection`` returns the client's current connection; liveness connections
        are made with its settings (address, credentials, TLS, timeouts), on first use."""
        check_name("owner id", owner)
        self._owner = owner
        self._connection = connection
        self._ping_every_s = ping_every_s
        self._wanted: set[str] = set()
        self._state: dict[str, asyncio.Future[None]] = {}  # pending, or done: confirmed
        self._route_of: dict[str, str] = {}
        self._routes: dict[str, _Route] = {}
        self._lock = asyncio.Lock()
        self._kick = asyncio.Event()
        self._keeper: asyncio.Task[None] | None = None
        self._closed = False

    @property
    def owner(self) -> str:
        return self._owner

    @property
    def channels(self) -> frozenset[str]:
        """The owner channels this process holds (or is subscribing to again)."""
        return frozenset(self._wanted)

    def is_held(self, tag: str) -> bool:
        """Whether the subscription in ``tag``'s slot is confirmed right now."""
        state = self._state.get(owner_channel(tag, self._owner))
        return state is not None and state.done() and not state.cancelled()

    async def hold(self, tag: str) -> None:
        """Subscribe to this owner's channel in the hash slot of ``tag`` and wait until
        Redis confirms it; cheap once held. Called before the first claim in a slot, so
        work taken there never looks like a gone owner's. :class:`NotConnectedError` if
        Redis cannot be reached (the subscription is then retried in the background)."""
        channel = owner_channel(tag, self._owner)
        if self._held(channel):
            return
        self._closed = False
        self._wanted.add(channel)
        self._ensure_keeper()
        await self._subscribe_missing()
        state = self._state.get(channel)
        if state is None:
            raise NotConnectedError(f"liveness subscription to {channel!r} was lost")
        try:
            await asyncio.wait_for(asyncio.shield(state), _SUBSCRIBE_TIMEOUT_S)
        except asyncio.CancelledError:
            if state.cancelled():  # the connection was lost meanwhile, not us
                raise NotConnectedError(
                    f"liveness connection lost while subscribing to {channel!r}"
                ) from None
            raise
        except asyncio.TimeoutError as exc:
            raise NotConnectedError(f"liveness subscription to {channel!r} unconfirmed") from exc

    def _held(self, channel: str) -> bool:
        state = self._state.get(channel)
        return state is not None and state.done() and not state.cancelled()

    # --- subscribing -------------------------------------------------------------------

    async def _subscribe_missing(self) -> None:
        """Subscribe every wanted channel that is neither confirmed nor pending, each on
        the node owning its slot."""
        async with self._lock:
            missing = sorted(c for c in self._wanted if c not in self._state)
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
                    if isinstance(exc, rex.RedisError | OSError):
                        await self._drop(route, f"subscribing failed ({exc})")
                        raise NotConnectedError(f"liveness subscription failed: {exc}") from exc
                    raise
                if route.reader is None or route.reader.done():
                    route.reader = asyncio.create_task(
                        self._read(route), name=f"flo-redis-liveness-{route_name or 'redis'}"
                    )

    def _route_for(self, channel: str) -> _Route:
        """The route of the node owning ``channel`` (its connection made on first use)."""
        conn = self._connection()
        cls: type[Any]
        if isinstance(conn, RedisCluster):
            node = conn.get_node_from_key(channel)
            if node is None:
                raise NotConnectedError(f"no cluster node owns liveness channel {channel!r}")
            name, cls, kwargs = node.name, node.connection_class, node.connection_kwargs
        else:
            main = conn.connection_pool
            name, cls, kwargs = "", main.connection_class, main.connection_kwargs
        route = self._routes.get(name)
        if route is None:
            settings = {**kwargs, "client_name": connection_name(self._owner)}
            pool = ConnectionPool(connection_class=cls, **settings)
            route = _Route(name, Redis(connection_pool=pool))
            self._routes[name] = route
        return route

    def _forget(self, name: str) -> None:
        """``name`` is no longer subscribed (or pending): the keeper takes it again."""
        state = self._state.pop(name, None)
        if state is not None and not state.done():
            state.cancel()
        route_name = self._route_of.pop(name, None)
        route = self._routes.get(route_name) if route_name is not None else None
        if route is not None:
            route.channels.discard(name)
        self._kick.set()

    def _ensure_keeper(self) -> None:
        if self._keeper is None or self._keeper.done():
            self._keeper = asyncio.create_task(self._keep(), name="flo-redis-liveness-keeper")

    async def _keep(self) -> None:
        """Subscribe again whatever was lost, at once, then backing off while it fails."""
        failures = 0
        while not self._closed:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._kick.wait(), 1.0)
            self._kick.clear()
            if self._closed or all(c in self._state for c in self._wanted):
                continue
            await asyncio.sleep(_RETRY_PAUSE_S[min(failures, len(_RETRY_PAUSE_S) - 1)])
            try:
                await self._refresh_slots()
                await self._subscribe_missing()
                failures = 0
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                failures += 1
                if failures == 1 or failures % 40 == 0:  # not 4 lines a second while down
                    log.warning("liveness of %s: subscribing again failed (%s)", self._owner, exc)
                self._kick.set()

    async def _refresh_slots(self) -> None:
        conn = self._connection()
        if isinstance(conn, RedisCluster):
            await conn.nodes_manager.initialize()

    # --- reading -----------------------------------------------------------------------

    async def _read(self, route: _Route) -> None:
        loop = asyncio.get_running_loop()
        pubsub = route.pubsub
        heard_at = loop.time()
        pinged_at: float | None = None
        while not self._closed and self._routes.get(route.name) is route:
            try:
                now = loop.time()
                if pinged_at is not None and now - pinged_at > self._ping_every_s:
                    raise rex.TimeoutError(f"no answer to PING in {self._ping_every_s:g} s")
                if pinged_at is None and now - heard_at >= self._ping_every_s:
                    await pubsub.ping()
                    pinged_at = now
                message = await pubsub.get_message(timeout=min(1.0, self._ping_every_s))
            except asyncio.CancelledError:
                raise
            except rex.ResponseError as exc:
                # MOVED / TRYAGAIN for a subscribe sent on a stale slot map: subscribe
                # again where the slot lives now.
                log.info("liveness subscription on %s redirected (%s)", route.name, exc)
                for name in list(route.channels):
                    if not self._held(name):
                        self._forget(name)
                continue
            except Exception as exc:
                await self._drop(route, f"liveness connection lost ({exc})")
                return
            if message is not None:
                heard_at, pinged_at = loop.time(), None
                self._dispatch(route, message)

    def _dispatch(self, route: _Route, message: dict[str, Any]) -> None:
        kind = message.get("type")
        channel = message.get("channel")
        name = channel.decode() if isinstance(channel, bytes) else str(channel)
        if kind == "ssubscribe":
            state = self._state.get(name)
            if state is not None and not state.done() and self._route_of.get(name) == route.name:
                state.set_result(None)
        elif kind == "sunsubscribe" and name in self._wanted:
            # The server dropped the subscription (the slot moved): take it again.
            log.warning("liveness channel %s unsubscribed by the server; subscribing again", name)
            with contextlib.suppress(Exception):
                route.pubsub.shard_channels.pop(channel, None)
            self._forget(name)

    async def _drop(self, route: _Route, why: str) -> None:
        """Forget a node's connection and subscriptions; the keeper makes them again."""
        if self._routes.get(route.name) is not route:
            return
        if not self._closed:
            log.warning("%s of %s; subscribing again", why, self._owner)
        del self._routes[route.name]
        for name in list(route.channels):
            self._forget(name)
        await route.close()

    async def close(self) -> None:
        """Drop every subscription and connection (the owner then looks gone)."""
        self._closed = True
        self._wanted.clear()
        keeper, self._keeper = self._keeper, None
        if keeper is not None:
            keeper.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await keeper
        routes, self._routes = list(self._routes.values()), {}
        for state in self._state.values():
            if not state.done():
                state.cancel()
        self._state.clear()
        self._route_of.clear()
        for route in routes:
            await route.close()

    def __repr__(self) -> str:
        return f"Liveness(owner={self._owner!r}, channels={len(self._wanted)})"


__all__ = ["DEFAULT_GRACE_MS", "Liveness", "connection_name"]
