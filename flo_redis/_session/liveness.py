"""Owner liveness: this process's owner channels, held so Redis can tell when it is gone.

What it is for and how the scripts judge an owner: docs/health.md ("When a worker process
dies") and ``lua/README.md`` ("Liveness"). This module holds the subscriptions
(:class:`Liveness`, through :mod:`flo_redis._session.pubsub`);
:mod:`flo_redis._session.reclaim` runs the scripts that read them.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from flo_redis._session.breaks import Breaks
from flo_redis._session.pubsub import Subscriber
from flo_redis._wire.keys import check_name, owner_channel

log = logging.getLogger("flo_redis.liveness")

DEFAULT_GRACE_MS = 1000
"""How long an owner must stay without its liveness subscription before its work is
taken back: long enough for a live process to resubscribe after a connection blip."""

_PING_EVERY_S = 5.0
# Subscribing again backs off only to a quarter of the default grace: after a Redis
# restart or failover a live owner must be back before others judge it gone.
_RETRY_PAUSE_S = (0.0, 0.02, 0.05, 0.1, 0.2, 0.25)
_NAME_CHARS = re.compile(r"[^A-Za-z0-9._:-]")


def connection_name(owner: str) -> str:
    """The ``CLIENT SETNAME`` of ``owner``'s liveness connections."""
    return "flo-live:" + _NAME_CHARS.sub("_", owner)


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
        breaks: Breaks | None = None,
    ) -> None:
        """``connection`` returns the client's current connection; liveness connections
        are made with its settings (address, credentials, TLS, timeouts), on first use.
        ``breaks`` hears when the hold on Redis breaks and stands again."""
        check_name("owner id", owner)
        self._owner = owner
        self._subscriptions = Subscriber(
            connection,
            purpose="liveness",
            log=log,
            deliver=False,
            keep=True,
            retry_pauses=_RETRY_PAUSE_S,
            ping_every_s=ping_every_s,
            client_name=connection_name(owner),
            breaks=breaks,
        )

    @property
    def owner(self) -> str:
        return self._owner

    @property
    def channels(self) -> frozenset[str]:
        """The owner channels this process holds (or is subscribing to again)."""
        return self._subscriptions.wanted

    def is_held(self, tag: str) -> bool:
        """Whether the subscription in ``tag``'s slot is confirmed right now."""
        return self._subscriptions.confirmed(owner_channel(tag, self._owner))

    async def hold(self, tag: str) -> None:
        """Subscribe to this owner's channel in the hash slot of ``tag`` and wait until
        Redis confirms it; cheap once held. Called before the first claim in a slot, so
        work taken there never looks like a gone owner's. :class:`NotConnectedError` if
        Redis cannot be reached (the subscription is then retried in the background),
        :class:`PermissionDeniedError` if Redis's ACL refuses what liveness needs."""
        channel = owner_channel(tag, self._owner)
        if self._subscriptions.refusal is not None:
            raise self._subscriptions.refusal  # e.g. its keep-alive PING refused by the ACL
        if self._subscriptions.confirmed(channel):
            return
        self._subscriptions.reopen()  # after close(): holding again takes it back
        await self._subscriptions.ensure([channel])

    async def move(self) -> None:
        """Subscribe again on new connections (``Subscriber.move``: after a failover)."""
        await self._subscriptions.move()

    async def close(self) -> None:
        """Drop every subscription and connection (the owner then looks gone)."""
        await self._subscriptions.close()

    def __repr__(self) -> str:
        return f"Liveness(owner={self._owner!r}, channels={len(self._subscriptions.wanted)})"


__all__ = ["DEFAULT_GRACE_MS", "Liveness", "connection_name"]
