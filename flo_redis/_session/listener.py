"""Waiting on pub/sub channels: a :class:`Listener` wakes on a message, a lost
subscription or its deadline; :class:`Listeners`, who listens on which channel of a
:class:`~flo_redis._session.pubsub.Subscriber`.

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
from collections.abc import Awaitable, Callable

from flo_redis._aio import raise_if_cancelling, wait_event


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


class Listeners:
    """The listeners of each channel, in the order they were attached: a message is told
    to them in that order (a poller's hand-off inbox, attached first, starts a handed run
    before the poll's watch is woken)."""

    __slots__ = ("_of",)

    def __init__(self) -> None:
        self._of: dict[str, dict[Listener, None]] = {}

    def __contains__(self, channel: str) -> bool:
        return channel in self._of

    def attach(self, listener: Listener) -> None:
        for name in listener.channels:
            self._of.setdefault(name, {})[listener] = None

    def detach(self, listener: Listener) -> list[str]:
        """Take ``listener`` off its channels; the channels nobody listens to any more."""
        idle = []
        for name in listener.channels:
            listeners = self._of.get(name)
            if listeners is not None:
                listeners.pop(listener, None)
                if not listeners:
                    del self._of[name]
                    idle.append(name)
        return idle

    def fire(self, channel: str, message: bytes | None = None) -> None:
        """Wake the listeners of ``channel`` (with ``message``, when one was heard)."""
        for listener in self._of.get(channel, ()):
            listener.fire(message)

    def fire_all(self) -> None:
        """Wake every listener now."""
        for listeners in self._of.values():
            for listener in listeners:
                listener.fire()


__all__ = ["Listener", "Listeners"]
