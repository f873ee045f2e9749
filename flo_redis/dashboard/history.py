"""The history charts of the overview and the action page: runs completed, failed and
retried per bin over the last 6, 24 or 72 hours, and an action's pickup latency and
handler duration (p50, p99) per bin, read with ``client.action.history``."""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Sequence
from dataclasses import dataclass

from flo_redis.actions.history import (
    BUCKETS,
    ActionHistory,
    HistoryPoint,
    Percentiles,
    format_ms,
    merged,
    percentiles,
)
from flo_redis.client import FloClient
from flo_redis.dashboard.sparkline import Chart, log_lines, stacked_bars
from flo_redis.errors import NotFoundError

# The windows a page offers, with the minutes each bar (or point) of its charts spans.
WINDOWS = {"6h": 5, "24h": 15, "72h": 60}
DEFAULT_WINDOW = "6h"
COUNTS = ("completed", "failed", "retried")  # the series of the bars, bottom up (CSS classes)
_NONE = (0,) * BUCKETS


@dataclass(frozen=True)
class HistoryCharts:
    """What a page draws of a history over ``window``: the counts chart (every action's,
    summed, on the overview), the percentiles chart (an action page only), the totals
    and the window's percentiles."""

    window: str
    every: str
    counts: Chart
    completed: int
    failed: int
    retried: int
    latency: Chart | None = None
    pickup: Percentiles | None = None
    duration: Percentiles | None = None


def window_arg(window: str | None) -> str:
    """The window a page was asked for; the default for anything it does not offer."""
    return window if window in WINDOWS else DEFAULT_WINDOW


def _clock(at_ms: int, with_day: bool) -> str:
    at = datetime.datetime.fromtimestamp(at_ms / 1000, datetime.timezone.utc)
    return at.strftime("%a %H:%M" if with_day else "%H:%M")


def _bins(histories: Sequence[ActionHistory], step: int) -> tuple[HistoryPoint, ...]:
    """The histories' points summed per minute (each read at its own moment: a read
    made after the minute turned has one minute more and one less), the newest window's
    worth, then summed per ``step`` minutes."""
    by_minute: dict[int, list[HistoryPoint]] = {}
    for h in histories:
        for point in h.points:
            by_minute.setdefault(point.at_ms, []).append(point)
    minutes = [merged(by_minute[at]) for at in sorted(by_minute)[-len(histories[0].points) :]]
    first = len(minutes) % step or step
    bins = [merged(minutes[:first])]
    bins += [merged(minutes[i : i + step]) for i in range(first, len(minutes), step)]
    return tuple(bins)


def charts(
    histories: Sequence[ActionHistory], window: str, what: str, detail: bool
) -> HistoryCharts:
    """The charts of ``histories`` (one for an action page; every action's, summed per
    minute, for the overview) in bins of the window's span; ``what`` names them for
    screen readers."""
    step = WINDOWS[window]
    every = f"{step} min"
    if not histories:
        return HistoryCharts(window, every, stacked_bars([], [], f"{what}: none"), 0, 0, 0)
    bins = _bins(histories, step)
    total = merged(bins)
    times = [_clock(p.at_ms, window == "72h") for p in bins]
    label = (
        f"{what}, last {window}: {total.completed} completed, {total.failed} failed, "
        f"{total.retried} retried"
    )
    series = [(field, [getattr(p, field) for p in bins]) for field in COUNTS]
    counts = stacked_bars(times, series, label)
    if not detail:
        return HistoryCharts(window, every, counts, total.completed, total.failed, total.retried)
    pickups = [percentiles(p.pickup) if p.pickup else None for p in bins]
    durations = [percentiles(p.duration) if p.duration else None for p in bins]
    lines = [
        ("pickup p50", [p.p50 if p else None for p in pickups]),
        ("pickup p99", [p.p99 if p else None for p in pickups]),
        ("duration p50", [d.p50 if d else None for d in durations]),
        ("duration p99", [d.p99 if d else None for d in durations]),
    ]
    p, d = percentiles(total.pickup or _NONE), percentiles(total.duration or _NONE)
    label = (
        f"{what}, last {window}: pickup p50 {format_ms(p.p50)}, p99 {format_ms(p.p99)}; "
        f"duration p50 {format_ms(d.p50)}, p99 {format_ms(d.p99)}"
    )
    latency = log_lines(times, lines, label, format_ms)
    return HistoryCharts(
        window, every, counts, total.completed, total.failed, total.retried, latency, p, d
    )


async def overview_charts(client: FloClient, actions: Sequence[str], window: str) -> HistoryCharts:
    """Every action's runs over ``window``, summed: one read of counts per action (one
    deleted meanwhile is left out)."""

    async def counts(action: str) -> ActionHistory | None:
        try:
            return await client.action.history(action, since=window, detail=False)
        except NotFoundError:
            return None

    found = await asyncio.gather(*(counts(a) for a in actions))
    return charts([h for h in found if h is not None], window, "every action", detail=False)


async def action_charts(client: FloClient, action: str, window: str) -> HistoryCharts:
    """One action's runs and their latencies over ``window``."""
    history = await client.action.history(action, since=window)
    return charts([history], window, f"action {action}", detail=True)
