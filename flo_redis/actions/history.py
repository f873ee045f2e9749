"""An action's history: runs completed, failed and retried in each minute of the last
72 hours, with the pickup latency and handler duration of its runs, fleet-wide.

The scripts that end or retry runs count them as they do it, on Redis's clock, into a
ring of one-minute slots per action (``lua/lib/history.lua``): every worker process adds
to the same counters, so what is read here is the whole fleet's. Latencies are counted
in log-scale buckets (:data:`EDGES_MS`) per minute; percentiles over any window are read
from the buckets' sums, interpolated within the bucket they fall in, as Prometheus's
``histogram_quantile`` does. One read is one read-only script call
(``lua/action_history.lua``).
"""

from __future__ import annotations

import re
import sys
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import timedelta

from flo_redis._session.session import Session
from flo_redis._wire.gateway import ACTION_HISTORY
from flo_redis._wire.keys import ActionKeys
from flo_redis._wire.refusals import not_registered
from flo_redis._wire.status import Status, refusal
from flo_redis.errors import ValidationError

MINUTES = 4320
"""Minutes of history kept (72 hours)."""
EDGES_MS = (
    1, 2, 5, 10, 20, 50, 100, 200, 500, 1_000, 2_000, 5_000, 10_000, 20_000, 50_000,
    100_000, 200_000, 500_000, 1_000_000, 2_000_000, 5_000_000, 10_000_000,
)  # fmt: skip
"""Bucket edges in ms (``lua/lib/history.lua``): bucket 0 holds under 1 ms, bucket i holds
``EDGES_MS[i-1] <= ms < EDGES_MS[i]``, the last one 10^7 ms (2.8 h) and more."""
BUCKETS = len(EDGES_MS) + 1
DEFAULT_SINCE = timedelta(hours=6)
# A slot's counters, by index (lua/lib/history.lua): three counts, then the buckets.
COMPLETED, FAILED, RETRIED, PICKUP, DURATION = 0, 1, 2, 3, 3 + BUCKETS
SLOT_BYTES = 4 + 3 * (DURATION + BUCKETS)  # a slot: its minute (u32), then u24 counters
COUNT_BYTES = 4 + 3 * PICKUP  # a slot's minute and its three counts
_SINCE = re.compile(r"\s*([0-9]{1,6})\s*(m|min|h|d)\s*")
_UNIT_MINUTES = {"m": 1, "min": 1, "h": 60, "d": 1440}
_NO_BUCKETS = (0,) * BUCKETS


@dataclass(frozen=True, slots=True)
class Percentiles:
    """Percentiles in ms over ``count`` samples; None without samples. A value in the
    last bucket reads as its lower edge (10^7 ms, 2.8 h)."""

    count: int
    p50: float | None
    p90: float | None
    p99: float | None


@dataclass(frozen=True, slots=True)
class HistoryPoint:
    """One minute (or a bin of minutes, :meth:`ActionHistory.binned`) starting at
    ``at_ms``: runs completed, failed (FAILED or TIMED_OUT; cancels are not failures) and
    retried (failed with attempts left, by their handler, a lease that ran out or a
    worker process that died), and the bucket counts (:data:`EDGES_MS`) of the pickup
    latency and handler duration of the attempts their handlers reported (completed or
    failed). Buckets are empty tuples in a history read without detail."""

    at_ms: int
    completed: int = 0
    failed: int = 0
    retried: int = 0
    pickup: tuple[int, ...] = ()
    duration: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class ActionHistory:
    """What an action's runs did over a window ending at ``at_ms`` (server time): one
    :class:`HistoryPoint` per minute, oldest first, the last being the current minute,
    and the percentiles of the whole window."""

    action: str
    namespace: str
    at_ms: int
    since: timedelta
    points: tuple[HistoryPoint, ...]
    pickup: Percentiles
    duration: Percentiles

    @property
    def completed(self) -> int:
        return sum(p.completed for p in self.points)

    @property
    def failed(self) -> int:
        return sum(p.failed for p in self.points)

    @property
    def retried(self) -> int:
        return sum(p.retried for p in self.points)

    def binned(self, minutes: int) -> tuple[HistoryPoint, ...]:
        """The points summed into bins of ``minutes`` (the last bin ends with the current
        minute; the first may be shorter), oldest first: what a chart of a long window
        draws."""
        if minutes < 1:
            raise ValidationError(f"bins must be at least 1 minute, got {minutes}")
        points = self.points
        first = len(points) % minutes or minutes
        bins = [points[:first]]
        bins += [points[i : i + minutes] for i in range(first, len(points), minutes)]
        return tuple(merged(b) for b in bins if b)


def merged(points: Sequence[HistoryPoint]) -> HistoryPoint:
    """``points`` summed into one, at the first one's time."""
    pickup = _sum_buckets(p.pickup for p in points)
    duration = _sum_buckets(p.duration for p in points)
    return HistoryPoint(
        points[0].at_ms,
        sum(p.completed for p in points),
        sum(p.failed for p in points),
        sum(p.retried for p in points),
        pickup,
        duration,
    )


def _sum_buckets(rows: Iterable[tuple[int, ...]]) -> tuple[int, ...]:
    full = [r for r in rows if r]
    if not full:
        return ()
    return tuple(map(sum, zip(*full, strict=True)))


def percentiles(buckets: Sequence[int]) -> Percentiles:
    """p50, p90 and p99 of bucket counts (:data:`EDGES_MS`), each interpolated linearly
    within the bucket it falls in."""
    total = sum(buckets)
    if total == 0:
        return Percentiles(0, None, None, None)
    return Percentiles(total, *(_quantile(buckets, total, q) for q in (0.5, 0.9, 0.99)))


def _quantile(buckets: Sequence[int], total: int, q: float) -> float:
    rank = q * total
    seen = 0
    for i, n in enumerate(buckets):
        if n and seen + n >= rank:
            if i == len(EDGES_MS):
                return float(EDGES_MS[-1])
            low = 0 if i == 0 else EDGES_MS[i - 1]
            return low + (EDGES_MS[i] - low) * (rank - seen) / n
        seen += n
    return float(EDGES_MS[-1])  # pragma: no cover - rank <= total always lands above


def format_ms(value: float | None) -> str:
    """A duration in ms for people: '0.4 ms', '12 ms', '1.5 s', '3.2 min', '2.1 h';
    '-' for None."""
    if value is None:
        return "-"
    if value < 10:
        return f"{value:.1f} ms" if value % 1 else f"{value:.0f} ms"
    if value < 1_000:
        return f"{value:.0f} ms"
    if value < 60_000:
        return f"{value / 1_000:.1f} s".replace(".0 s", " s")
    if value < 3_600_000:
        return f"{value / 60_000:.1f} min".replace(".0 min", " min")
    return f"{value / 3_600_000:.1f} h".replace(".0 h", " h")


def since_arg(since: timedelta | str) -> timedelta:
    """``since`` as a window of whole minutes from 1 minute to 72 hours: a
    :class:`~datetime.timedelta`, or text such as ``30m``, ``6h``, ``72h`` or ``3d``.
    :class:`ValidationError` saying what is accepted for anything else."""
    given = since
    if isinstance(since, str):
        match = _SINCE.fullmatch(since)
        if match is None:
            raise ValidationError(
                f"since {since!r} is not a window; give minutes, hours or days such as "
                "30m, 6h, 72h or 3d (at most 72h)"
            )
        since = timedelta(minutes=int(match[1]) * _UNIT_MINUTES[match[2]])
    if not isinstance(since, timedelta):
        raise ValidationError(f"since must be a timedelta or text like '6h', got {since!r}")
    if since < timedelta(minutes=1) or since > timedelta(minutes=MINUTES):
        raise ValidationError(
            f"since must be from 1 minute to 72 hours (the history kept), got {given!r}"
        )
    return since


def _minutes(since: timedelta) -> int:
    return max(1, min(MINUTES, -(-int(since.total_seconds()) // 60)))


async def read_history(
    session: Session, keys: ActionKeys, since: timedelta | str, detail: bool = True
) -> ActionHistory:
    """The history of ``keys``' action over ``since`` (:func:`since_arg`), in one
    read-only script call; without ``detail`` only the counts are read (a thirteenth
    of the bytes), and the percentiles are empty. :class:`NotFoundError` for an action
    that is not registered."""
    window = since_arg(since)
    if not isinstance(detail, bool):
        raise ValidationError(f"detail must be True or False, got {detail!r}")
    minutes = _minutes(window)
    reply = await ACTION_HISTORY(session, keys, [minutes, 1 if detail else 0])
    if reply.status == Status.NO_ACTION:
        raise not_registered(keys)
    if reply.status != Status.OK:
        raise refusal(reply.status, f"history of action {keys.action!r}: refused")
    oldest = reply.now_ms // 60_000 - minutes + 1
    points = decode_slots(reply.slots, oldest, minutes, SLOT_BYTES if detail else COUNT_BYTES)
    whole = merged(points)
    return ActionHistory(
        keys.action,
        keys.namespace,
        reply.now_ms,
        window,
        points,
        percentiles(whole.pickup or _NO_BUCKETS),
        percentiles(whole.duration or _NO_BUCKETS),
    )


def decode_slots(slots: bytes, oldest: int, minutes: int, width: int) -> tuple[HistoryPoint, ...]:
    """The ``minutes`` slots of ``width`` bytes in ``slots`` (short: empty), the first
    for minute ``oldest``; a slot stamped with another minute is empty."""
    live: list[int] = []
    body = bytearray()
    for i in range(minutes):
        at = i * width
        if int.from_bytes(slots[at : at + 4], "big") == oldest + i:
            live.append(i)
            body += slots[at + 4 : at + width]
    values = _u24s(bytes(body))
    per = (width - 4) // 3
    points = [HistoryPoint((oldest + i) * 60_000) for i in range(minutes)]
    for n, i in enumerate(live):
        v = values[n * per : (n + 1) * per]
        if per > PICKUP:
            pickup, duration = tuple(v[PICKUP:DURATION]), tuple(v[DURATION:])
        else:
            pickup = duration = ()
        points[i] = HistoryPoint(
            (oldest + i) * 60_000, v[COMPLETED], v[FAILED], v[RETRIED], pickup, duration
        )
    return tuple(points)


def _u24s(raw: bytes) -> array[int]:
    """Big-endian unsigned 24-bit integers, decoded in C: each widened to 32 bits."""
    n = len(raw) // 3
    wide = bytearray(4 * n)
    wide[1::4], wide[2::4], wide[3::4] = raw[0::3], raw[1::3], raw[2::3]
    values = array("I")
    values.frombytes(bytes(wide))
    if sys.byteorder == "little":
        values.byteswap()
    return values


__all__ = [
    "BUCKETS",
    "DEFAULT_SINCE",
    "EDGES_MS",
    "MINUTES",
    "ActionHistory",
    "HistoryPoint",
    "Percentiles",
    "format_ms",
    "percentiles",
    "read_history",
    "since_arg",
]
