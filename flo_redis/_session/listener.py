"""Waiting on pub/sub channels: a :class:`Listener` wakes on a message, a lost
subscription or its deadline (how to use one: :mod:`flo_redis._session.pubsub`)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from flo_redis._session.aio import raise_if_cancelling, wait_event


class Listener:
    """Interest in a set of channels of a message-delivering
    :class:`flo_redis._session.pubsub.Subscriber` (whose ``ensure`` subscribes them): :meth:`wait`
    returns on a message, a lost subscription, or the deadline."""

    def __init__(self, ensure: Callable[[list[str]], Awaitable[None]], channels: list[str]) -> None:
        self._ensure = ensure
        self.channels = channels
        self._event = asyncio.Event()
        self.message: bytes | None = None
        """The payload of the last message heard since :meth:`arm` (None: none)."""

    async def arm(self) -> None:
        """Forget what was heard so far and make sure the subscriptions stand (after a
        lost connection or a moved slot they are made again); call before each look at
        the state the messages are about. :class:`NotConnectedError` when Redis cannot
        be reached or does not confirm within 5 s."""
        self._event.clear()
        self.message = None
        await self._ensure(self.channels)

    def fire(self, message: bytes | None = None) -> None:
        if message is not None:
            self.message = message
        self._event.set()

    async def wait(self, timeout_s: float) -> bool:
        """True if woken before ``timeout_s`` passed (spurious wake-ups are possible)."""
        raise_if_cancelling()
        return await wait_event(self._event, timeout_s)


__all__ = ["Listener"]
