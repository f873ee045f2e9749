"""When a schedule's occurrences fall: cron expressions (through ``croniter``, the
``cron`` extra) matched against an explicit time zone's wall clock, and intervals counted
from an anchor, so every occurrence is ``anchor + k * interval`` on Redis's clock, whenever
it happens to be fired. And the checks of a schedule's spec and time zone, made before
anything is written.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from flo_redis.errors import ValidationError

MIN_INTERVAL = timedelta(seconds=1)
"""The shortest interval: workers look for due schedules about once a second."""


def _croniter() -> Any:
    try:
        import croniter
    except ImportError as exc:  # pragma: no cover - exercised only without the extra
        raise ImportError(
            "cron schedules need the 'cron' extra: pip install 'flo-redis[cron]'"
        ) from exc
    return croniter


def _cron_after(cron: str, start: datetime) -> datetime:
    """The first time after ``start`` that ``cron`` matches; :class:`ValidationError`
    for an expression that matches no date at all (``30 2 31 2 *``: February 31st)."""
    return next(_cron_times(cron, start))


def _cron_times(cron: str, start: datetime) -> Iterator[datetime]:
    """The times after ``start`` that ``cron`` matches, in order (as ``start``: a naive
    one gives wall-clock times); :class:`ValidationError` for an expression that matches
    no date at all."""
    croniter = _croniter()
    times = croniter.croniter(cron, start)
    while True:
        try:
            yield times.get_next(datetime)
        except croniter.CroniterBadDateError as exc:
            raise ValidationError(
                f"cron expression {cron!r} never matches a date; check its day-of-month "
                "and month fields (a day that month never has, such as February 30th or "
                "31st, or the 31st of a 30-day month)"
            ) from exc


def check_cron(expression: object) -> str:
    """``expression`` if it is a cron expression that matches a date; otherwise
    :class:`ValidationError` saying why: not five valid fields, or fields that no date
    satisfies (so the schedule would never fire, and computing its next occurrence
    would fail)."""
    if not isinstance(expression, str) or not _croniter().croniter.is_valid(expression):
        raise ValidationError(
            f"{expression!r} is not a cron expression; write five fields "
            "'minute hour day-of-month month day-of-week', e.g. '*/5 * * * *'"
        )
    _cron_after(expression, datetime.now(dt_timezone.utc))
    return expression


def check_spec(spec: object) -> tuple[str | None, timedelta | None]:
    """``spec`` as (cron expression, None) or (None, interval); :class:`ValidationError`
    naming what is wrong otherwise."""
    if isinstance(spec, timedelta):
        if spec < MIN_INTERVAL:
            raise ValidationError(
                f"schedule interval {spec} is shorter than {MIN_INTERVAL}; "
                "use an interval of at least a second"
            )
        return None, spec
    if isinstance(spec, str):
        return check_cron(spec), None
    raise ValidationError(
        "a schedule is a cron expression (str) or an interval (datetime.timedelta), "
        f"got {type(spec).__name__}"
    )


def check_timezone(name: object) -> ZoneInfo:
    """The IANA time zone ``name``; :class:`ValidationError` for an unknown one."""
    if not isinstance(name, str) or not name:
        raise ValidationError(f"timezone must be an IANA zone name such as 'UTC', got {name!r}")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ValidationError(
            f"unknown time zone {name!r}; use an IANA zone name such as 'UTC' or 'Europe/Paris'"
        ) from exc


def interval_ms(every: timedelta) -> int:
    """``every`` in whole milliseconds, exactly (``total_seconds() * 1000`` is a float:
    1.001 s would come out as 1000.9999 and be cut to 1000 ms, a millisecond lost at every
    occurrence)."""
    return every // timedelta(milliseconds=1)


def occurrence_after(
    cron: str | None, every: timedelta | None, tz: str, anchor_ms: int, after_ms: int
) -> int:
    """The first occurrence strictly after ``after_ms``. An interval's occurrences are
    ``anchor_ms + k * interval``: the anchor is an occurrence (the one just fired), never
    the time it was fired at, so the phase is kept however late a firing comes."""
    if every is not None:
        step = interval_ms(every)
        return anchor_ms + step * ((after_ms - anchor_ms) // step + 1)
    assert cron is not None  # a schedule has a cron expression or an interval
    # The expression is matched against the zone's wall clock (naive times), each match
    # then placed on the time line: "0 9 * * *" is 09:00 local on every day, the days the
    # clocks change included. A wall-clock time the clock shows twice (the hour repeated
    # when it goes back) is one occurrence, at its first showing; one it skips (the hour
    # lost when it goes forward) comes that much later, just after the change (fold 0,
    # PEP 495). Matches that fall at or before ``after_ms`` on the time line (inside a
    # repeated hour) are stepped over.
    zone = ZoneInfo(tz)
    wall = datetime.fromtimestamp(after_ms / 1000, dt_timezone.utc).astimezone(zone)
    matches = _cron_times(cron, wall.replace(tzinfo=None))
    for _, match in zip(range(_MAX_CRON_STEPS), matches, strict=False):
        instant = int(match.replace(tzinfo=zone).timestamp() * 1000)
        if instant > after_ms:
            return instant
    raise ValidationError(  # pragma: no cover - a repeated hour holds at most 60 matches
        f"cron expression {cron!r} has no occurrence after {after_ms} ms in {tz}"
    )


# Matches looked at for one occurrence: within a repeated hour a match may fall before the
# time searched from (at most one a minute, 60), never more.
_MAX_CRON_STEPS = 1000


__all__ = [
    "MIN_INTERVAL",
    "check_cron",
    "check_spec",
    "check_timezone",
    "interval_ms",
    "occurrence_after",
]
