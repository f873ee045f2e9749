"""``flo-redis stats ACTION --since 6h``: what an action's runs did, minute by minute, over
up to 72 hours, and how long they waited and ran (p50/p90/p99), fleet-wide."""

from __future__ import annotations

import datetime
from typing import Any

import click

from flo_redis.actions.history import (
    EDGES_MS,
    ActionHistory,
    HistoryPoint,
    format_ms,
    percentiles,
    since_arg,
)
from flo_redis.cli import _ops as ops
from flo_redis.cli import _tables as tables
from flo_redis.cli._names import Names
from flo_redis.cli._render import say
from flo_redis.cli.status import SPARK
from flo_redis.errors import ValidationError

ROWS = 24  # rows the table of a window has at most, by default


def register(group: click.Group) -> None:
    group.add_command(stats)


def _window(ctx: click.Context, param: click.Parameter, text: str) -> datetime.timedelta:
    try:
        return since_arg(text)
    except ValidationError as exc:
        raise click.BadParameter(str(exc)) from None


def _every(ctx: click.Context, param: click.Parameter, text: str | None) -> int | None:
    """``--every`` as whole minutes (None: chosen from the window)."""
    if text is None:
        return None
    try:
        minutes = since_arg(text).total_seconds() // 60
    except ValidationError:
        raise click.BadParameter(f"{text!r} is not a span such as 1m, 15m or 1h") from None
    return int(minutes)


@click.command("stats")
@ops.connection_options
@ops.json_option
@tables.wide_option
@click.argument("action")
@click.option("--since", "since", default="6h", show_default=True, callback=_window,
              help="The window: 30m, 6h, 72h (at most 72h, the history kept).")  # fmt: skip
@click.option("--every", default=None, callback=_every,
              help="One row per this span (1m, 15m, 1h); default: at most 24 rows.")  # fmt: skip
def stats(
    url: str,
    namespace: str,
    as_json: bool,
    action: str,
    since: datetime.timedelta,
    every: int | None,
) -> None:
    """Runs of ACTION completed, failed and retried over the window, and the p50/p90/p99
    of their pickup latency and handler duration, counted by every worker on Redis's
    clock."""
    history = ops.with_client(
        url, namespace, lambda c: c.action.history(action, since=since), Names(action=action)
    )
    step = every or max(1, -(-len(history.points) // ROWS))
    points = history.binned(step)
    if as_json:
        ops.print_json(as_data(history, points if every else history.points, every or 1))
        return
    say(_summary(history))
    top = max((p.completed + p.failed for p in points), default=0)
    columns = ["from", "completed", "failed", "retried", "", "pickup p99", "duration p50",
               "duration p99"]  # fmt: skip
    rows = [_row(p, step, top) for p in points]
    drop = ["", "pickup p99", "duration p50"]
    title = f"{action!r} every {_span(step)} (UTC)"
    tables.console().print(tables.table(title, columns, rows, drop=drop))


def _summary(h: ActionHistory) -> str:
    minutes = max(1, len(h.points))
    at = _clock(h.at_ms, with_date=True)
    return "\n".join(
        (
            f"action {h.action!r} in {h.namespace!r}, last {_span(minutes)} to {at} UTC",
            f"  completed {h.completed} ({h.completed / minutes:.1f}/min), failed {h.failed}, "
            f"retried {h.retried}",
            "  pickup   " + _percentiles(h.pickup.p50, h.pickup.p90, h.pickup.p99),
            "  duration " + _percentiles(h.duration.p50, h.duration.p90, h.duration.p99),
        )
    )


def _percentiles(*values: float | None) -> str:
    if values[0] is None:
        return "no runs reported"
    named = zip(("p50", "p90", "p99"), values, strict=True)
    return "  ".join(f"{name} {format_ms(v)}" for name, v in named)


def _row(p: HistoryPoint, step: int, top: int) -> tuple[object, ...]:
    pickup, duration = _quantiles(p.pickup), _quantiles(p.duration)
    return (
        _clock(p.at_ms, with_date=step >= 60),
        p.completed,
        p.failed,
        p.retried,
        _bar(p.completed + p.failed, top),
        format_ms(pickup[2]),
        format_ms(duration[0]),
        format_ms(duration[2]),
    )


def _quantiles(buckets: tuple[int, ...]) -> tuple[float | None, ...]:
    if not buckets:
        return (None, None, None)
    p = percentiles(buckets)
    return (p.p50, p.p90, p.p99)


def _bar(n: int, top: int) -> str:
    """``n`` as a block as high as its share of ``top`` (the busiest row)."""
    return SPARK[n * (len(SPARK) - 1) // top] if n else ""


def _span(minutes: int) -> str:
    if minutes % 60 == 0:
        return f"{minutes // 60}h"
    return f"{minutes}m"


def _clock(at_ms: int, with_date: bool = False) -> str:
    at = datetime.datetime.fromtimestamp(at_ms / 1000, datetime.timezone.utc)
    return at.strftime("%Y-%m-%d %H:%M" if with_date else "%H:%M")


def as_data(h: ActionHistory, points: tuple[HistoryPoint, ...], every: int) -> dict[str, Any]:
    """The history as JSON-ready data: totals, percentiles (ms), and a point per
    ``every`` minutes with its bucket counts (``bucket_edges_ms``)."""
    return {
        "action": h.action,
        "namespace": h.namespace,
        "at_ms": h.at_ms,
        "since_minutes": int(h.since.total_seconds() // 60),
        "every_minutes": every,
        "completed": h.completed,
        "failed": h.failed,
        "retried": h.retried,
        "pickup_ms": ops.plain(h.pickup),
        "duration_ms": ops.plain(h.duration),
        "bucket_edges_ms": list(EDGES_MS),
        "points": [ops.plain(p) for p in points],
    }


__all__ = ["as_data", "stats"]
