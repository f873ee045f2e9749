"""Wake-ups: the poller's side of ``lua/README.md`` ("Wake-ups").

A poller arms its :class:`Watch` (its wake subscriptions stand, confirmed), *then* runs
its claim, then sleeps on the watch until a wake-up or its deadline. :func:`long_poll`
is that loop, the one every blocking take runs (action claims, stream and group
reads). The subscribing is :mod:`flo_redis._session.pubsub`'s; a :class:`Waker` is its
message-delivering kind, and a one-off wait for a message (``client.action.wait``)
listens on the client's waker too, never on the liveness connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from flo_redis._session.listener import Listener
from flo_redis._session.pubsub import Subscriber

log = logging.getLogger("flo_redis.wake")

# Pollers arm again on their own schedule; these only pace a subscribe that is not
# confirmed (redirected, or its slot moved) while the poller waits for it.
_RETRY_PAUSE_S = (0.0, 0.02, 0.05, 0.1, 0.2, 0.5)


class Watch(Listener):
    """Interest in a set of wake channels; ``wait`` returns on a wake-up or the deadline."""

    def __init__(self, waker: Waker, channels: list[str], since: int | None = None) -> None:
        super().__init__(waker.ensure, channels)
        self._waker = waker
        self._generation = waker.generation if since is None else since

    @property
    def interrupted(self) -> bool:
        """True once :meth:`Waker.interrupt` was called after this watch began, or after
        the :attr:`Waker.generation` it was given as ``since``."""
        return self._waker.generation != self._generation


class Waker(Subscriber):
    """One client's wake-channel subscriptions, shared by all of its pollers."""

    def __init__(self, redis: Redis | RedisCluster) -> None:
        super().__init__(
            lambda: redis,
            purpose="wake",
            log=log,
            deliver=True,
            keep=False,
            retry_pauses=_RETRY_PAUSE_S,
        )
        self.generation = 0

    @contextlib.asynccontextmanager
    async def watching(
        self, channels: Iterable[str], since: int | None = None
    ) -> AsyncIterator[Watch]:
        """Yield a :class:`Watch` on ``channels`` (subscribed by its first ``arm``; they
        stay subscribed for the next poll), interrupted by any :meth:`interrupt` after
        generation ``since`` (None: after now)."""
        watch = Watch(self, list(dict.fromkeys(channels)), since)
        async with self.attached(watch):
            yield watch

    def interrupt(self) -> None:
        """End every waiting poll now: each returns at once, empty (:func:`long_poll`)."""
        self.generation += 1
        self.fire_all()

    async def close(self) -> None:
        self.interrupt()
        await super().close()


T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Attempt(Generic[T]):
    """What one look of a long poll found: ``items`` taken, and when something falls
    due by itself (``due_ms``, -1: nothing; a delayed run, an ack deadline). ``held``:
    what is there is held back until ``due_ms`` (a rate limit), so a wake-up cannot
    help before then."""

    items: list[T] = field(default_factory=list)
    due_ms: int = -1
    held: bool = False


async def long_poll(
    waker: Waker,
    channels: Iterable[str],
    block_ms: int,
    attempt: Callable[[], Awaitable[Attempt[T]]],
    *,
    server_clock_ms: Callable[[], Awaitable[int]] | None = None,
    since: int | None = None,
) -> list[T]:
    """Run ``attempt`` until it takes something or ``block_ms`` passes (0: once), sleeping
    on ``channels``' wake-ups in between, never on a blocking command: arm the watch,
    look, sleep until a wake-up, the look's ``due_ms`` or the deadline; one last look
    at the deadline. ``due_ms`` is ms from now, or with ``server_clock_ms`` a time on
    Redis's clock (read only when a poll is about to sleep). ``client.interrupt()`` ends
    the wait at once, empty; so does one made after the :attr:`Waker.generation` passed
    as ``since``, read before the poll's first await (a stop that lands while the poll
    prepares is not lost). A retried look (a poll id the scripts replay) is the
    caller's: ``attempt`` sends the same request each time."""
    if block_ms == 0:
        return (await attempt()).items
    loop = asyncio.get_running_loop()
    deadline = loop.time() + block_ms / 1000.0
    async with waker.watching(channels, since) as watch:
        while True:
            await watch.arm()
            found = await attempt()
            if found.items:
                return found.items
            remaining = deadline - loop.time()
            if remaining <= 0 or watch.interrupted:
                return []
            if found.due_ms >= 0:
                due_in = found.due_ms
                if server_clock_ms is not None:
                    due_in -= await server_clock_ms()
                remaining = min(remaining, max(due_in, 1) / 1000.0)
            if found.held:
                # A wake-up cannot take anything before the hold ends, so only the time
                # (or an interrupt) ends this wait.
                end = loop.time() + remaining
                while not watch.interrupted and loop.time() < end:
                    await watch.arm()
                    await watch.wait(end - loop.time())
            else:
                await watch.wait(remaining)
            if watch.interrupted:
                return []  # client.interrupt(): stop waiting, take nothing more
            if loop.time() >= deadline:
                # One last look: work may have arrived with the deadline.
                return (await attempt()).items


__all__ = ["Attempt", "Waker", "Watch", "long_poll"]
