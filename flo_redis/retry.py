"""Waiting between tries: resending refusals, failed polls and empty polls.

* ``RetryPolicy`` (flo's shape) says how often the client resends a request
  that was refused *without running*: status OVERLOADED or UNAVAILABLE and
  ``ran == Ran.NO``. Nothing else is resent, so a resend can never run a
  request twice. ``backoff_delays`` and ``retry_refused`` apply it.
* ``worker_backoff`` / ``Backoff`` pace a worker's poll loop after failed polls.
* ``EmptyPollBackoff`` paces a poll loop whose blocking reads come back empty early.

All waits are in seconds unless a name ends in ``_ms``.
"""

from __future__ import annotations

import asyncio
import math
import random
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import TypeVar

from flo_redis._aio import sleep_unless_stopped
from flo_redis.errors import ServerError
from flo_redis.types import Ran, StatusCode

__all__ = [
    "DEFAULT_RETRY_POLICY",
    "RETRYABLE_STATUSES",
    "WORKER_INITIAL_BACKOFF_S",
    "WORKER_MAX_BACKOFF_S",
    "Backoff",
    "EmptyPollBackoff",
    "RetryPolicy",
    "backoff_delays",
    "is_refused_unrun",
    "retry_refused",
    "sleep_unless_stopped",
    "worker_backoff",
]

T = TypeVar("T")

#: Refusal statuses that are resent, and only when ``ran`` is ``Ran.NO``.
RETRYABLE_STATUSES: frozenset[StatusCode] = frozenset(
    {StatusCode.OVERLOADED, StatusCode.UNAVAILABLE}
)


def _finite(value: float, fallback: float) -> float:
    return value if math.isfinite(value) else fallback


@dataclass(frozen=True)
class RetryPolicy:
    """How often a request refused without running is sent again.

    Attributes:
        max_attempts: tries in all, the first included; 1 or less means no
            resend.
        initial_backoff_ms: ceiling of the first wait; later ceilings double.
        max_backoff_ms: the largest ceiling.

    Each wait is uniform in [0, ceiling]. Out-of-range values are normalised
    on construction rather than refused: a negative or non-finite initial
    becomes 0, a non-finite maximum or one below the initial becomes the
    initial, a non-finite attempt count becomes 1 and a fractional one is
    truncated.
    """

    max_attempts: int = 4
    initial_backoff_ms: float = 50
    max_backoff_ms: float = 1000

    def __post_init__(self) -> None:
        initial = max(_finite(self.initial_backoff_ms, 0.0), 0.0)
        ceiling = max(_finite(self.max_backoff_ms, initial), initial)
        attempts = int(self.max_attempts) if math.isfinite(self.max_attempts) else 1
        object.__setattr__(self, "initial_backoff_ms", initial)
        object.__setattr__(self, "max_backoff_ms", ceiling)
        object.__setattr__(self, "max_attempts", attempts)


#: 4 tries; the waits' ceilings are 50, 100 and 200 ms (at most 350 ms in all).
DEFAULT_RETRY_POLICY = RetryPolicy()


def is_refused_unrun(exc: BaseException) -> bool:
    """Whether ``exc`` is a refusal that is safe and worth resending: a
    ServerError with status OVERLOADED or UNAVAILABLE and ``ran == Ran.NO``."""
    return (
        isinstance(exc, ServerError) and exc.status_code in RETRYABLE_STATUSES and exc.ran == Ran.NO
    )


class Backoff:
    """A doubling, capped, fully jittered wait.

    ``next()`` returns a wait uniform in [0, ceiling]; the ceiling starts at
    ``initial_s`` and doubles after each call up to ``max_s``. ``reset()``
    starts again from ``initial_s``. Negative bounds count as 0, and a
    maximum below the initial counts as the initial.
    """

    def __init__(self, initial_s: float, max_s: float) -> None:
        self._initial = max(initial_s, 0.0)
        self._max = max(max_s, self._initial)
        self._ceiling = self._initial

    @property
    def ceiling(self) -> float:
        """The upper bound of the next wait."""
        return self._ceiling

    def next(self) -> float:
        """The next wait, in seconds."""
        wait = random.uniform(0.0, self._ceiling)
        self._ceiling = min(self._ceiling * 2.0, self._max)
        return wait

    def reset(self) -> None:
        """Start again from the initial ceiling."""
        self._ceiling = self._initial


def backoff_delays(policy: RetryPolicy = DEFAULT_RETRY_POLICY) -> Iterator[float]:
    """The waits, in seconds, before each resend the policy allows.

    Yields ``max(policy.max_attempts - 1, 0)`` waits; wait ``i`` (from 0) is
    uniform in [0, min(initial * 2**i, max)] milliseconds, converted to seconds.
    """
    backoff = Backoff(policy.initial_backoff_ms / 1000.0, policy.max_backoff_ms / 1000.0)
    for _ in range(max(policy.max_attempts - 1, 0)):
        yield backoff.next()


async def retry_refused(
    send: Callable[[], Awaitable[T]],
    policy: RetryPolicy = DEFAULT_RETRY_POLICY,
    *,
    refused: ServerError | None = None,
) -> T:
    """Await ``send()``; while it raises a refusal that ``is_refused_unrun``,
    wait per ``policy`` and call it again. Returns the first answer; raises the
    last refusal once the attempts are used up, and any other error at once.
    ``send`` must build a fresh request on each call. ``refused``: the first try
    was already made by the caller and refused so; the next is the second."""
    delays = backoff_delays(policy)
    if refused is not None:
        delay = next(delays, None)
        if delay is None:
            raise refused
        await asyncio.sleep(delay)
    while True:
        try:
            return await send()
        except ServerError as exc:
            if not is_refused_unrun(exc):
                raise
            delay = next(delays, None)
            if delay is None:
                raise
        await asyncio.sleep(delay)


#: A worker's poll loop waits up to this after its first failed poll in a row...
WORKER_INITIAL_BACKOFF_S = 0.1
#: ...doubling per failure up to this.
WORKER_MAX_BACKOFF_S = 5.0


def worker_backoff(attempt: int) -> float:
    """The wait, in seconds, after the ``attempt``-th failed poll in a row
    (counting from 0): uniform in [0, min(0.1 * 2**attempt, 5.0)]."""
    exponent = min(max(attempt, 0), 32)
    ceiling = min(WORKER_INITIAL_BACKOFF_S * 2.0**exponent, WORKER_MAX_BACKOFF_S)
    return random.uniform(0.0, ceiling)


class EmptyPollBackoff:
    """Paces a poll loop whose blocking reads come back empty early.

    An empty answer can mean the wait ran out (fine: poll again at once), that
    the poll could not be parked (polling again at once would spin), or that a
    new entry woke it (polling again at once picks it up). The rules:

    * an empty poll that took at least ``min(250 ms, block_ms / 2)`` is not
      early: no pause, and the streak of early ones ends;
    * the first early empty poll in a row gets no pause;
    * later ones in the same streak pause 50 ms, doubling up to 1 s;
    * ``reset()`` (call it after a non-empty poll) ends the streak.
    """

    EARLY_S = 0.25
    FIRST_PAUSE_S = 0.05
    MAX_PAUSE_S = 1.0

    def __init__(self, block_ms: int, stop: asyncio.Event | None = None) -> None:
        self._early_s = min(self.EARLY_S, block_ms / 2000.0)
        self._stop = stop if stop is not None else asyncio.Event()
        self._streak = 0

    def reset(self) -> None:
        """A poll returned something: the next early empty poll is again the first."""
        self._streak = 0

    def next_pause(self, elapsed_s: float) -> float:
        """Record an empty poll that took ``elapsed_s``; return the pause before the next."""
        if elapsed_s >= self._early_s:
            self._streak = 0
            return 0.0
        self._streak += 1
        if self._streak == 1:
            return 0.0
        doublings = min(self._streak - 2, 20)
        return min(self.FIRST_PAUSE_S * float(1 << doublings), self.MAX_PAUSE_S)

    async def empty(self, elapsed_s: float) -> None:
        """Record an empty poll and wait its pause, cut short if ``stop`` is set."""
        pause = self.next_pause(elapsed_s)
        if pause:
            await sleep_unless_stopped(self._stop, pause)
