"""Percentiles and bins read from an action's history buckets (no Redis needed)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from flo_redis import ValidationError
from flo_redis.actions.history import (
    BUCKETS,
    EDGES_MS,
    ActionHistory,
    HistoryPoint,
    percentiles,
    since_arg,
)


def buckets(**at: int) -> list[int]:
    """Bucket counts with ``b<i>=n`` set."""
    counts = [0] * BUCKETS
    for name, n in at.items():
        counts[int(name[1:])] = n
    return counts


def test_percentiles_interpolate_within_their_bucket() -> None:
    # 100 samples in [100, 200) ms: the median is halfway, p90 nine tenths in.
    p = percentiles(buckets(b7=100))
    assert (EDGES_MS[6], EDGES_MS[7]) == (100, 200)
    assert (p.count, p.p50, p.p90, p.p99) == (100, 150.0, 190.0, 199.0)


def test_a_tail_shows_in_the_high_percentiles_only() -> None:
    p = percentiles(buckets(b1=98, b12=2))  # 98 under 2 ms, 2 in [5 s, 10 s)
    assert p.p50 is not None and p.p50 < 2
    assert p.p90 is not None and p.p90 < 2
    assert p.p99 is not None and 5_000 <= p.p99 < 10_000


def test_no_samples_no_percentiles_and_the_last_bucket_reads_as_its_edge() -> None:
    assert percentiles([0] * BUCKETS).p50 is None
    assert percentiles(buckets(b22=3)).p99 == EDGES_MS[-1]


def test_points_are_binned_from_the_newest_minute_back() -> None:
    points = tuple(HistoryPoint(m * 60_000, completed=1, retried=m % 2) for m in range(7))
    none = percentiles([0] * BUCKETS)
    h = ActionHistory("job", "ns", 7 * 60_000, timedelta(minutes=7), points, none, none)
    bins = h.binned(3)
    assert [b.at_ms // 60_000 for b in bins] == [0, 1, 4]
    assert [b.completed for b in bins] == [1, 3, 3]
    assert sum(b.retried for b in bins) == h.retried == 3
    with pytest.raises(ValidationError):
        h.binned(0)


@pytest.mark.parametrize(
    ("text", "minutes"), [("30m", 30), ("6h", 360), ("72h", 4320), ("3d", 4320), ("1m", 1)]
)
def test_windows_are_read_from_text(text: str, minutes: int) -> None:
    assert since_arg(text) == timedelta(minutes=minutes)


@pytest.mark.parametrize("bad", ["0m", "73h", "4d", "6", "6x", "h", "", "1.5h", "-1h"])
def test_windows_out_of_range_or_unreadable_are_refused(bad: str) -> None:
    with pytest.raises(ValidationError, match="since"):
        since_arg(bad)
