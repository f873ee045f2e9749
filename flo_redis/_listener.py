"""Waiting on pub/sub channels: a :class:`Listener` wakes on a message, a lost
subscription or its deadline (how to use one: :mod:`flo_redis._pubsub`)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable


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


class Listener:
    """Interest in a set of channels of a message-delivering
    :class:`flo_redis._pubsub.Subscriber` (whose ``ensure`` subscribes them): :meth:`wait`
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


__all__ = ["Listener", "raise_if_cancelling"]
