"""Counting starts in windows: what a rate limit promises, checked at every position."""

from __future__ import annotations


def most_in_any_window(starts: list[int], per_ms: int) -> int:
    """The most starts within any half-open window [t, t + per_ms)."""
    starts = sorted(starts)
    most, j = 0, 0
    for i, t in enumerate(starts):
        while starts[j] <= t - per_ms:
            j += 1
        most = max(most, i - j + 1)
    return most
