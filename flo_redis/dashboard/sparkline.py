"""Drawings of counts over time, as inline SVG: a throughput sparkline (per-minute counts
as polylines), and the history charts (stacked bars of counts, percentile lines on a log
scale, with their axes).

No script and no image request: the page carries the drawing itself, so it shows under
the dashboard's strict Content-Security-Policy and without network access. Colours come
from the stylesheet, by each shape's class.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

WIDTH = 120
HEIGHT = 24
_PAD = 2


@dataclass(frozen=True)
class Sparkline:
    """One ``<polyline points=...>`` value per series in a WIDTH x HEIGHT box (y grows
    downwards), all on one scale; each series' ``totals`` and the ``peak`` minute."""

    lines: tuple[str, ...]
    totals: tuple[int, ...]
    peak: int
    width: int = WIDTH
    height: int = HEIGHT


def sparkline(*series: Sequence[int]) -> Sparkline:
    """Scale every series (oldest first) to the box by the highest value of any; all
    zeros draw a flat baseline."""
    peak = max((max(s) for s in series if s), default=0)
    span = HEIGHT - 2 * _PAD
    lines = []
    for values in series:
        step = (WIDTH - 2 * _PAD) / max(len(values) - 1, 1)
        coords = (
            f"{_PAD + i * step:.1f},{HEIGHT - _PAD - (span * v / peak if peak else 0):.1f}"
            for i, v in enumerate(values or [0])
        )
        lines.append(" ".join(coords))
    return Sparkline(tuple(lines), tuple(sum(s) for s in series), peak)


# --- history charts: stacked bars of counts, percentile lines on a log scale -----------

CHART_WIDTH = 720
CHART_HEIGHT = 150
_LEFT, _RIGHT, _TOP, _BOTTOM = 52, 8, 8, 20  # the plot area's margins (axis labels)
_X_TICKS = 6


@dataclass(frozen=True)
class Rect:
    """One bar segment, of the series ``kind`` (a CSS class)."""

    kind: str
    x: float
    y: float
    width: float
    height: float


@dataclass(frozen=True)
class Tick:
    """An axis label ``text`` at ``at`` (x for the time axis, y for the value axis)."""

    at: float
    text: str


@dataclass(frozen=True)
class Chart:
    """A history chart in a CHART_WIDTH x CHART_HEIGHT box: bar segments, polylines
    (CSS class, points; a series with gaps is several), the axes' ticks, the plot area
    and a one-line description for screen readers."""

    rects: tuple[Rect, ...]
    lines: tuple[tuple[str, str], ...]
    x_ticks: tuple[Tick, ...]
    y_ticks: tuple[Tick, ...]
    label: str
    width: int = CHART_WIDTH
    height: int = CHART_HEIGHT
    left: int = _LEFT
    right: int = CHART_WIDTH - _RIGHT
    top: int = _TOP
    bottom: int = CHART_HEIGHT - _BOTTOM


def _x_ticks(times: Sequence[str], slot: float) -> tuple[Tick, ...]:
    step = max(1, -(-len(times) // _X_TICKS))
    return tuple(Tick(_LEFT + i * slot, times[i]) for i in range(0, len(times), step))


def stacked_bars(
    times: Sequence[str], series: Sequence[tuple[str, Sequence[int]]], label: str
) -> Chart:
    """One bar per bin (``times`` label each, oldest first), each stacked from the
    ``series`` (CSS class, counts per bin) in order, all on one scale: the busiest bin
    reaches the top."""
    n = max(len(times), 1)
    totals = [sum(s[1][i] for s in series) for i in range(len(times))]
    peak = max(totals, default=0)
    plot_h = CHART_HEIGHT - _TOP - _BOTTOM
    slot = (CHART_WIDTH - _LEFT - _RIGHT) / n
    rects = []
    for i in range(len(times)):
        base = float(CHART_HEIGHT - _BOTTOM)
        for kind, values in series:
            if not values[i]:
                continue
            h = plot_h * values[i] / peak
            base -= h
            rects.append(Rect(kind, _LEFT + i * slot + 0.5, base, max(slot - 1, 0.5), h))
    bottom = CHART_HEIGHT - _BOTTOM
    y_ticks = (Tick(bottom, "0"),) + ((Tick(_TOP, f"{peak:,}"),) if peak else ())
    return Chart(tuple(rects), (), _x_ticks(times, slot), y_ticks, label)


def log_lines(
    times: Sequence[str],
    series: Sequence[tuple[str, Sequence[float | None]]],
    label: str,
    tick_text: Callable[[float], str],
) -> Chart:
    """One polyline per series (CSS class, a value per bin or None where the bin has
    none; a gap splits the line) on a log scale of whole decades around every value;
    values under 0.1 are drawn at 0.1. ``tick_text`` writes a decade's label."""
    values = [max(v, 0.1) for _, vs in series for v in vs if v is not None]
    n = max(len(times), 1)
    slot = (CHART_WIDTH - _LEFT - _RIGHT) / n
    if not values:
        return Chart((), (), _x_ticks(times, slot), (), label)
    low = math.floor(math.log10(min(values)))
    high = max(math.ceil(math.log10(max(values))), low + 1)
    plot_h = CHART_HEIGHT - _TOP - _BOTTOM

    def y(v: float) -> float:
        return CHART_HEIGHT - _BOTTOM - plot_h * (math.log10(max(v, 0.1)) - low) / (high - low)

    lines = []
    for kind, vs in series:
        run: list[tuple[float, float]] = []
        for i, v in enumerate([*vs, None]):
            if v is not None:
                run.append((_LEFT + (i + 0.5) * slot, y(v)))
                continue
            if len(run) == 1:  # a lone point draws as a short dash, so it shows
                (x0, y0) = run[0]
                run = [(x0 - 2, y0), (x0 + 2, y0)]
            if run:
                lines.append((kind, " ".join(f"{px:.1f},{py:.1f}" for px, py in run)))
            run = []
    y_ticks = tuple(Tick(y(10.0**d), tick_text(10.0**d)) for d in range(low, high + 1))
    return Chart((), tuple(lines), _x_ticks(times, slot), y_ticks, label)
