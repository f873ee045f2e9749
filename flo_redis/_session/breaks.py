"""Breaks in a session's hold on Redis: when its liveness connection was lost (or found
on a server that turned replica), and when every subscription stood again.

A break is where a failover or a restart without the data shows itself to a live
process: the server it held its subscriptions on went away, and what that server had
answered last may not have reached the one that answers now. Workers watch the breaks
to send again what they reported just before one (:mod:`flo_redis.worker.replay`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

log = logging.getLogger("flo_redis.liveness")

Watcher = tuple[Callable[[], None], Callable[[], None]]


class Breaks:
    """The breaks of one session: each watcher's ``began`` is called once when a break
    begins, its ``ended`` once when it ends (never raising into the caller)."""

    def __init__(self) -> None:
        self._watchers: list[Watcher] = []
        self.broken = False

    def watch(self, began: Callable[[], None], ended: Callable[[], None]) -> Watcher:
        """Call ``began`` and ``ended`` at each break from now on; the handle to
        :meth:`unwatch`."""
        watcher = (began, ended)
        self._watchers.append(watcher)
        return watcher

    def unwatch(self, watcher: Watcher) -> None:
        if watcher in self._watchers:
            self._watchers.remove(watcher)

    def began(self) -> None:
        """The hold on Redis broke (a lost connection, a server turned replica)."""
        if not self.broken:
            self.broken = True
            self._tell(0)

    def ended(self) -> None:
        """Every subscription stands again."""
        if self.broken:
            self.broken = False
            self._tell(1)

    def _tell(self, which: int) -> None:
        for watcher in list(self._watchers):
            try:
                watcher[which]()
            except Exception:  # a watcher's fault is its own
                log.exception("a watcher of liveness breaks failed")
