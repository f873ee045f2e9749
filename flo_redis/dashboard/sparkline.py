"""A throughput sparkline: per-minute counts as the points of inline SVG polylines.

No script and no image request: the page carries the drawing itself, so it shows under
the dashboard's strict Content-Security-Policy and without network access.
"""

from __future__ import annotations

from collections.abc import Sequence
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
