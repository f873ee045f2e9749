"""Wake-ups: the poller's side of ``lua/README.md`` ("Wake-ups").

A poller arms its :class:`Watch` (its wake subscriptions stand, confirmed), *then* runs
its claim, then sleeps on the watch until a wake-up or its deadline. The subscribing is
:mod:`flo_redis._pubsub`'s; a :class:`Waker` is its message-delivering kind, and a
one-off wait for a message (``client.action.wait``) listens on the client's waker too,
never on the liveness connection.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Iterable

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from ._listener import Listener, raise_if_cancelling
from ._pubsub import Subscriber

log = logging.getLogger("flo_redis.wake")

# Pollers arm again on their own schedule; these only pace a subscribe that is not
# confirmed (redirected, or its slot moved) while the poller waits for it.
_RETRY_PAUSE_S = (0.0, 0.02, 0.05, 0.1, 0.2, 0.5)


class Watch(Listener):
    """Interest in a set of wake channels; ``wait`` returns on a wake-up or the deadline."""

    def __init__(self, waker: Waker, channels: list[str]) -> None:
        super().__init__(waker.ensure, channels)
        self._waker = waker
        self._generation = waker.generation

    @property
    def interrupted(self) -> bool:
        """True once :meth:`Waker.interrupt` was called after this watch began."""
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
    async def watching(self, channels: Iterable[str]) -> AsyncIterator[Watch]:
        """Yield a :class:`Watch` on ``channels`` (subscribed by its first ``arm``; they
        stay subscribed for the next poll)."""
        watch = Watch(self, list(dict.fromkeys(channels)))
        async with self.attached(watch):
            yield watch

    def interrupt(self) -> None:
        """End every waiting poll now: each makes one last claim and returns."""
        self.generation += 1
        self.fire_all()

    async def close(self) -> None:
        self.interrupt()
        await super().close()


__all__ = ["Waker", "Watch", "raise_if_cancelling"]
