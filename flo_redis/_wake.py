"""Wake-ups: idle pollers sleep until a script announces work, not on a polling interval.

Scripts that make work available (invoke, append, nack, retry, reclaim) ``SPUBLISH`` on
the queue's wake channel. Each client keeps one pub/sub connection for wake channels
(never the liveness connection: a frozen process whose liveness connection filled with
messages would be disconnected — a false death). A poller *first* registers interest and
waits for the subscription to be confirmed, *then* runs its claim, then sleeps: a wake-up
published between "nothing to claim" and "start waiting" is therefore never missed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Iterable
from typing import Any

import redis.exceptions as rex
from redis.asyncio import Redis
from redis.asyncio.client import PubSub

log = logging.getLogger("flo_redis.wake")

_SUBSCRIBE_TIMEOUT_S = 5.0


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
        lost connection they are made again); call before each claim."""
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


class Waker:
    """One client's wake-channel subscriptions, shared by all of its pollers."""

    def __init__(self, redis: Redis) -> None:
        self._redis = redis
        self._pubsub: PubSub | None = None
        self._reader: asyncio.Task[None] | None = None
        self._watches: dict[str, set[Watch]] = {}
        self._confirmed: dict[str, asyncio.Future[None]] = {}
        self._lock = asyncio.Lock()
        self._closed = False
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

    async def _ensure_subscribed(self, names: list[str]) -> None:
        missing = [n for n in names if n not in self._confirmed]
        if missing:
            async with self._lock:
                missing = [n for n in names if n not in self._confirmed]
                if missing:
                    loop = asyncio.get_running_loop()
                    for name in missing:
                        self._confirmed[name] = loop.create_future()
                    pubsub = self._ensure_pubsub()
                    try:
                        await pubsub.ssubscribe(*missing)
                    except BaseException:
                        for name in missing:
                            self._confirmed.pop(name).cancel()
                        raise
        waits = [self._confirmed[n] for n in names if not self._confirmed[n].done()]
        if waits:
            await asyncio.wait_for(
                asyncio.gather(*(asyncio.shield(w) for w in waits)), _SUBSCRIBE_TIMEOUT_S
            )

    def _ensure_pubsub(self) -> PubSub:
        if self._pubsub is None:
            self._pubsub = self._redis.pubsub()
        if self._reader is None or self._reader.done():
            self._reader = asyncio.create_task(self._read(), name="flo-redis-wake-reader")
        return self._pubsub

    async def _read(self) -> None:
        while not self._closed:
            pubsub = self._pubsub
            if pubsub is None:
                return
            try:
                if not pubsub.subscribed:
                    await asyncio.sleep(0.01)
                    continue
                message = await pubsub.get_message(timeout=1.0)
            except asyncio.CancelledError:
                raise
            except (rex.ConnectionError, rex.TimeoutError, OSError) as exc:
                log.warning("wake connection lost (%s); pollers will subscribe again", exc)
                await self._reset(pubsub)
                return
            if message is not None:
                self._dispatch(message)

    def _dispatch(self, message: dict[str, Any]) -> None:
        kind = message.get("type")
        channel = message.get("channel")
        name = channel.decode() if isinstance(channel, bytes) else str(channel)
        if kind == "ssubscribe":
            future = self._confirmed.get(name)
            if future is not None and not future.done():
                future.set_result(None)
        elif kind == "smessage":
            for watch in self._watches.get(name, ()):
                watch.fire()
        elif kind == "sunsubscribe":
            # The server dropped us (slot migration): subscribe again, wake everyone.
            self._confirmed.pop(name, None)
            self._wake_all()

    async def _reset(self, old: PubSub) -> None:
        """After a lost connection: drop the pub/sub and wake everyone; each poller's next
        :meth:`Watch.arm` subscribes again on a new connection."""
        self._pubsub = None
        for future in self._confirmed.values():
            if not future.done():
                future.cancel()
        self._confirmed.clear()
        self._wake_all()
        with contextlib.suppress(Exception):
            await old.aclose()  # type: ignore[no-untyped-call]

    async def close(self) -> None:
        self._closed = True
        self.interrupt()
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._reader
            self._reader = None
        if self._pubsub is not None:
            with contextlib.suppress(Exception):
                await self._pubsub.aclose()  # type: ignore[no-untyped-call]
            self._pubsub = None
