"""How far ahead of its handlers an ActionWorker claims.

A worker whose handlers are short would otherwise sit idle for every claim's round
trip: its slots free up, it claims, and only when the answer arrives do handlers run
again. So while a backlog lasts, a worker keeps a few claimed runs in hand (each under
its lease, with its token) and its next claim in flight while its handlers run: a slot
that frees up starts the next run in hand at once.

How many: enough to cover twice the time a claim takes at the rate the handlers finish
(``2 * concurrency * claim time / handler time``), never more than the concurrency. A
worker with long handlers therefore holds none (one second per handler and a
millisecond per claim make 0.2 of a run at concurrency 100): its runs wait in the queue,
where any worker can take them. A worker with short ones holds up to one batch, what
its handlers finish within two claim round trips, so no other worker is kept waiting
longer than that, and a run of a lower priority number queued meanwhile overtakes at
most what is in hand.

A run in hand whose lease is half gone is given back instead of started (a slow handler
ahead of it held its slot): the auto-touch of a handler touches at a third of the lease
from its start, which is still before the end of a lease started half a lease earlier.
Runs in hand when the worker stops are given back without spending their attempt.
"""

from __future__ import annotations

from collections import deque
from typing import NamedTuple

from flo_redis._wire.replies import Claimed

# How much a new sample moves an estimate (exponentially weighted mean).
_WEIGHT = 0.2
# What a claim is taken to cost until one was timed (seconds).
_FIRST_CLAIM_S = 0.001


class InHand(NamedTuple):
    """A run claimed ahead, and when (event-loop time) its claim was answered."""

    run: Claimed
    claimed_at: float


class Prefetch:
    """The runs a worker holds ahead of its handlers, and how many it may hold."""

    __slots__ = ("_claim_s", "_handler_s", "backlog", "concurrency", "enabled", "runs")

    def __init__(self, concurrency: int, *, enabled: bool) -> None:
        self.concurrency = concurrency
        self.enabled = enabled
        self.runs: deque[InHand] = deque()
        self._claim_s = _FIRST_CLAIM_S
        self._handler_s = 0.0  # not known until a handler ended: hold nothing before
        self.backlog = False  # the last poll took all it asked for: claim ahead

    def depth(self) -> int:
        """How many claimed runs to hold beyond the running handlers."""
        if not self.enabled or self._handler_s <= 0.0:
            return 0
        ahead = 2.0 * self.concurrency * self._claim_s / self._handler_s
        return self.concurrency if ahead >= self.concurrency else int(ahead)

    def room(self, running: int) -> int:
        """How many runs the next poll may take now, with ``running`` handlers started;
        0: wait. With a slot free, every free slot and the runs to hold in hand; with
        every slot busy, a claim ahead once the runs in hand fell to half of what to
        hold."""
        concurrency = self.concurrency
        depth = self.depth() if self.backlog else 0
        room = concurrency + depth - running - len(self.runs)
        if running < concurrency:
            return room
        return room if depth and room >= max(1, depth // 2) else 0

    def polled(self, taken: int, room: int, ahead: bool, took_s: float) -> None:
        """A poll for ``room`` runs (``ahead``: every slot busy) took ``taken`` runs in
        ``took_s`` seconds."""
        self.backlog = taken >= room
        if ahead or taken >= room > 1:  # answered without waiting for work
            self.claim_took(took_s)

    def handler_took(self, seconds: float) -> None:
        """A handler ended ``seconds`` after it began."""
        if seconds < 1e-6:
            seconds = 1e-6
        if self._handler_s <= 0.0:
            self._handler_s = seconds
        else:
            self._handler_s += _WEIGHT * (seconds - self._handler_s)

    def claim_took(self, seconds: float) -> None:
        """A claim that did not wait for work was answered after ``seconds``."""
        self._claim_s += _WEIGHT * (seconds - self._claim_s)

    def take(self, run_id: str, token: int) -> InHand | None:
        """Remove and return the run in hand with this id and token, if any."""
        for held in self.runs:
            if held.run.run_id == run_id and held.run.token == token:
                self.runs.remove(held)
                return held
        return None


__all__ = ["InHand", "Prefetch"]
