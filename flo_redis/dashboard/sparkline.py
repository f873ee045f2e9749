"""A throughput sparkline: per-minute counts as the points of an inline SVG polyline.

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
    """``points`` for ``<polyline points=...>`` in a WIDTH x HEIGHT box (y grows
    downwards), the ``total`` and ``peak`` it draws, for the label beside it."""

    points: str
    total: int
    peak: int
    width: int = WIDTH
    height: int = HEIGHT


def sparkline(values: Sequence[int]) -> Sparkline:
    """Scale ``values`` (oldest first) to the box; all zeros draw a flat baseline."""
    if not values:
        values = [0]
    peak = max(values)
    span = HEIGHT - 2 * _PAD
    step = (WIDTH - 2 * _PAD) / max(len(values) - 1, 1)
    coords = []
    for i, v in enumerate(values):
        x = _PAD + i * step
        y = HEIGHT - _PAD - (span * v / peak if peak > 0 else 0)
        coords.append(f"{x:.1f},{y:.1f}")
    return Sparkline(" ".join(coords), sum(values), peak)
