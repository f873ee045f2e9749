"""Reports sent again after an outage: what a failover may have taken with it.

Redis replicates asynchronously. A primary that dies (or restarts without its data) takes
with it the writes it answered that had not reached its replica yet, and the worker that
sent them has moved on: a complete answered a moment before the kill is lost, and the
new primary still shows the run held by this live worker, so neither liveness nor a
resend brings it back — only the run's lease running out, and then the run goes again.

So a worker keeps the reports the store answered in the last :data:`WINDOW_S` (at most
:data:`MOST` of them: completes and acks), and when its session's hold on Redis breaks
(its liveness connection is lost, or found on a server that turned replica:
:mod:`flo_redis._session.breaks`) and stands again, sends again those answered in the
window before the break. A
report is fenced by its token and an identical resend of one that took effect is
answered as success (:mod:`flo_redis.worker.delivery`), so sending them again changes
nothing where they survived, and applies those that were lost: the run completes as its
handler said, the record is acked, and nothing waits out a lease. A report the new
primary refuses (its run or record was lost too, or moved on) is dropped quietly: the
run comes back under the usual rules.

Only what the outage could have lost is sent: a report answered longer than the window
before it had surely reached a healthy replica. Replication lag is milliseconds on a
working link, but a replica on a loaded machine has been seen more than 2 s behind, so
the window is :data:`WINDOW_S` (10 s) and the newest :data:`MOST` reports, whichever is
less: a resend that finds its report applied changes nothing, so a wide window costs
only the resend (one batch call per action or partition, once per outage), and memory is
bounded by ``MOST`` whatever the window. A worker that needs no loss at all says so with
a durability level (``Durability.replicated``); this is what the default level does to
make a failover cost as little as it can.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from itertools import groupby
from typing import Generic, TypeVar

from flo_redis.errors import NotDurableError, ServerError, is_connection_error

log = logging.getLogger("flo_redis.worker")

#: How long before an outage an answered report is sent again after it (a replica this
#: far behind loses what a resend cannot bring back).
WINDOW_S = 10.0
#: The most reports kept (the newest): memory stays bounded at any throughput.
MOST = 10_000

Item = TypeVar("Item")
#: Sends one key's items again (an action's completes, a partition's acks); how many of
#: them took effect now (were lost, and are applied by this send), None if not told.
Resend = Callable[[str, Sequence[Item]], Awaitable[int | None]]


class Replay(Generic[Item]):
    """The recent answered reports of one worker, by key, and their resend after an
    outage (module docstring)."""

    def __init__(self, what: str, resend: Resend[Item], clock: Callable[[], float]) -> None:
        """``what`` names the reports in the log (``completes``, ``acks``); ``clock`` is
        the event loop's time."""
        self._what = what
        self._resend = resend
        self._clock = clock
        self._kept: deque[tuple[float, str, Item]] = deque(maxlen=MOST)
        self._due: list[tuple[float, str, Item]] = []
        self._broken = False

    def answered(
        self, key: str, items: Sequence[Item], answers: Sequence[ServerError | None]
    ) -> None:
        """A batch of ``key``'s ``items`` was answered: keep those the store accepted
        (answer None) for the window."""
        now = self._clock()
        if answers.count(None) == len(items):  # the common case: all accepted
            self._kept.extend((now, key, item) for item in items)
        else:
            accepted = (item for item, answer in zip(items, answers, strict=True) if not answer)
            self._kept.extend((now, key, item) for item in accepted)

    def outage_began(self) -> None:
        """The hold on Redis broke: what was answered in the window before now is due
        to be sent again once it stands again."""
        since = self._clock() - WINDOW_S
        self._due += [entry for entry in self._kept if entry[0] >= since]
        self._kept.clear()
        self._broken = True

    async def outage_ended(self) -> None:
        """The hold stands again: send what is due, and what was answered since the
        break began (an answer the old server sent as it died may arrive after the break
        was seen), each key's items in one batch. A send applied but not yet at its
        durability level (a new primary with fewer replicas than the level waits for) is
        kept as answered now, so another outage within the window sends it again. A send
        that fails otherwise is given up (logged): the reports it carried come back under
        their lease, as without this."""
        if not self._broken:
            return
        due = self._due + list(self._kept)
        self._due, self._broken = [], False
        self._kept.clear()
        if not due:
            return
        due.sort(key=lambda entry: entry[1])
        applied: int | None = 0
        for key, entries in groupby(due, key=lambda entry: entry[1]):
            items = [entry[2] for entry in entries]
            try:
                now = await self._resend(key, items)
            except NotDurableError as exc:
                # Applied on the new primary, not yet on enough of its replicas (they sync
                # once one follows it): kept as answered now, so another outage soon after
                # sends them again.
                answered = self._clock()
                self._kept.extend((answered, key, item) for item in items)
                log.info(
                    "sent again %d %s of %s after the outage: %s", len(items), self._what, key, exc
                )
                applied = None
                continue
            except Exception as exc:  # given up: the lease rules bring the runs back
                log.warning(
                    "sending %d %s of %s again after the outage failed (%s)",
                    len(items),
                    self._what,
                    key,
                    exc,
                    exc_info=not isinstance(exc, ServerError) and not is_connection_error(exc),
                )
                continue
            applied = None if now is None or applied is None else applied + now
        told = "" if applied is None else f"; {applied} had been lost with it and took effect now"
        log.log(
            logging.WARNING if applied else logging.INFO,
            "Redis is back: sent again the %d %s answered in the %.1f s before the outage%s",
            len(due),
            self._what,
            WINDOW_S,
            told,
        )
