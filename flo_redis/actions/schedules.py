"""Schedules: runs of an action created on a cron expression or a fixed interval.

A schedule lives in its action's queue (``schedules`` / ``schedule_due``, same hash slot),
so firing one is a single script (``lua/schedule_fire.lua``): it creates the run of the
due occurrence — the occurrence is the run's idempotency key — and advances the schedule
to the next occurrence, atomically, refusing an occurrence not yet due by server time and
an advance from a caller that read an older state. The next occurrence is computed here,
in Python (cron expressions through ``croniter``, the ``cron`` extra), in the schedule's
explicit time zone, and passed to the script.

Every worker serving an action fires its due schedules from its reaper's upkeep (about
once a second), so schedules keep firing while any worker is up and no leader exists.
A schedule the upkeep cannot evaluate (its record does not decode, or names a time zone
this host does not know) is set aside into the action's quarantine, logged once at
WARNING, and the action's other schedules fire on.
"""

from __future__ import annotations

import builtins
import enum
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from flo_redis._wire.aside import SetAside, scope_of, warn_set_aside, warn_unreadable
from flo_redis._wire.checks import check_bytes
from flo_redis._wire.codec import pack, text, unpack_record
from flo_redis._wire.gateway import (
    SCHEDULE_DUE,
    SCHEDULE_FIRE,
    SCHEDULE_QUARANTINE,
    SCHEDULE_REMOVE,
    SCHEDULE_SET,
)
from flo_redis._wire.keys import ActionKeys, action_keys, check_name, namespace_keys, run_id_prefix
from flo_redis._wire.refusals import not_registered, raise_refusal
from flo_redis._wire.status import Status
from flo_redis.errors import ValidationError, server_error
from flo_redis.types import Ran, Reason, StatusCode

if TYPE_CHECKING:
    from flo_redis._session.session import Session

log = logging.getLogger("flo_redis.schedules")

MIN_INTERVAL = timedelta(seconds=1)
"""The shortest interval: workers look for due schedules about once a second."""
FIRE_BATCH = 100
"""Due schedules of one action read (and fired, one script call each) per upkeep."""
LIST_LIMIT = 1000
"""Schedules one action may hold as listed by :func:`list_schedules`."""


class Missed(str, enum.Enum):
    """What a schedule does about occurrences that passed while no worker was up.

    ``ONCE`` (the default) fires the oldest missed occurrence once, late, and skips to
    the next occurrence after now; ``ALL`` fires every missed occurrence, each once."""

    ONCE = "once"
    ALL = "all"


@dataclass(frozen=True, slots=True)
class Schedule:
    """A named schedule of ``action``: a ``cron`` expression or an ``every`` interval,
    evaluated in ``timezone``; each occurrence creates one run with ``input``.
    ``next_due_ms`` is the next occurrence (server time, ms since the epoch)."""

    action: str
    name: str
    cron: str | None
    every: timedelta | None
    timezone: str
    input: bytes
    missed: Missed
    next_due_ms: int

    def following(self, due_ms: int, now_ms: int) -> int:
        """The occurrence after ``due_ms`` (for ``Missed.ONCE``, the first after now)."""
        after = due_ms if self.missed is Missed.ALL else max(due_ms, now_ms)
        return _occurrence_after(self.cron, self.every, self.timezone, due_ms, after)


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


def _occurrence_after(
    cron: str | None, every: timedelta | None, tz: str, anchor_ms: int, after_ms: int
) -> int:
    """The first occurrence strictly after ``after_ms``; intervals count from ``anchor_ms``."""
    if every is not None:
        step = int(every.total_seconds() * 1000)
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


def _record(
    cron: str | None, every: timedelta | None, tz: str, data: bytes, missed: Missed
) -> bytes:
    every_ms = 0 if every is None else int(every.total_seconds() * 1000)
    return pack({"c": cron or "", "e": every_ms, "z": tz, "i": data, "m": missed.value})


def _decode(action: str, name: str, due_ms: int, raw: bytes) -> Schedule:
    rec = unpack_record(raw)
    cron = bytes(rec["c"]).decode() or None
    every_ms = int(rec["e"])
    return Schedule(
        action=action,
        name=name,
        cron=cron,
        every=timedelta(milliseconds=every_ms) if every_ms else None,
        timezone=bytes(rec["z"]).decode(),
        input=bytes(rec["i"]),
        missed=Missed(bytes(rec["m"]).decode()),
        next_due_ms=due_ms,
    )


def check_missed(missed: object) -> Missed:
    """``missed`` as a :class:`Missed`; :class:`ValidationError` naming the choices."""
    try:
        return Missed(missed)
    except ValueError as exc:
        raise ValidationError(f"missed must be 'once' or 'all', got {missed!r}") from exc


@dataclass(frozen=True, slots=True)
class ScheduleDeclaration:
    """A schedule to set: one ``client.action.schedule`` sets now, or one a worker
    declares with ``@worker.cron`` and sets when it starts."""

    action: str
    spec: str | timedelta
    name: str | None
    input: bytes
    timezone: str
    missed: Missed

    async def apply(self, session: Session, namespace: str | None = None) -> Schedule:
        """Create or replace the schedule ``name`` (default: the action's name) of the
        action. Setting an identical schedule again keeps its next occurrence. Refuses a
        bad cron expression, interval, time zone or input (:class:`ValidationError`) and
        an action that is not registered (:class:`NotFoundError`) before anything is
        written."""
        keys = action_keys(session.get_namespace(namespace), self.action)
        cron, every = check_spec(self.spec)
        check_timezone(self.timezone)
        label = check_name("schedule name", self.action if self.name is None else self.name)
        data = check_bytes("input", self.input, session.max_payload_bytes)
        now_ms = (await SCHEDULE_DUE(session, keys, [1, 1])).now_ms
        first = _occurrence_after(cron, every, self.timezone, now_ms, now_ms)
        record = _record(cron, every, self.timezone, data, self.missed)
        reply = await SCHEDULE_SET(session, keys, [label, record, first])
        if reply.status == Status.NO_ACTION:
            raise not_registered(keys)
        due = first if reply.flag else await _due_of(session, keys, label, first)
        return Schedule(self.action, label, cron, every, self.timezone, data, self.missed, due)


async def _due_of(session: Session, keys: ActionKeys, name: str, default: int) -> int:
    listed = await SCHEDULE_DUE(session, keys, [LIST_LIMIT, 0])
    return next((due for n, due, _ in listed.rows if n == name), default)


async def list_schedules(
    session: Session, action: str | None = None, namespace: str | None = None
) -> list[Schedule]:
    """The schedules of ``action`` (of every registered action when None), by action,
    then next occurrence."""
    ns = session.get_namespace(namespace)
    if action is None:
        raw = await session.redis.zrange(namespace_keys(ns).actions, 0, -1)
        actions = [text(a) or "" for a in raw]
    else:
        actions = [action]
    found: builtins.list[Schedule] = []
    for name in actions:
        keys = action_keys(ns, name)
        listed = await SCHEDULE_DUE(session, keys, [LIST_LIMIT, 0])
        for label, due, record in listed.rows:
            try:
                found.append(_decode(name, label, due, record))
            except Exception as exc:  # left out: a worker's upkeep sets it aside
                warn_unreadable(
                    ("schedule", keys.tag, label),
                    f"schedule {label!r} of action {name!r} (namespace {ns!r}): its record "
                    f"does not decode ({type(exc).__name__}: {exc}); left out of the list",
                )
    return found


async def remove_schedule(
    session: Session, action: str, name: str | None = None, namespace: str | None = None
) -> None:
    """Remove the schedule ``name`` (default: the action's name) of ``action``; runs it
    already created stay. :class:`NotFoundError` when there is no such schedule."""
    keys = action_keys(session.get_namespace(namespace), action)
    label = check_name("schedule name", action if name is None else name)
    reply = await SCHEDULE_REMOVE(session, keys, [label])
    if reply.status == Status.NOT_FOUND:
        raise server_error(
            StatusCode.NOT_FOUND,
            Reason.NOT_FOUND,
            f"action {action!r} has no schedule {label!r}; list them with action.schedules()",
            Ran.NO,
        )


async def fire_due(session: Session, action: str, namespace: str | None = None) -> int:
    """Fire every occurrence of ``action``'s schedules due by server time (at most
    :data:`FIRE_BATCH` schedules, one script call each); answers how many runs were
    created. Safe from any number of workers at once: each occurrence creates one run."""
    keys = action_keys(session.get_namespace(namespace), action)
    due = await SCHEDULE_DUE(session, keys, [FIRE_BATCH, 1])
    prefix = run_id_prefix(action)
    created = 0
    for name, due_ms, raw in due.rows:
        try:
            schedule = _decode(action, name, due_ms, raw)
            following = schedule.following(due_ms, due.now_ms)
        except Exception as exc:  # pure computation: its record, its zone, croniter
            await _set_aside(session, keys, name, raw, f"{type(exc).__name__}: {exc}")
            continue
        reply = await SCHEDULE_FIRE(session, keys, [prefix, name, due_ms, following])
        if reply.status == Status.BAD_RECORD:
            aside = SetAside("schedule", name, "its stored record does not decode")
            warn_set_aside(scope_of(keys), [aside])
        elif reply.status == Status.OK and not reply.existing:
            created += 1
            log.debug("schedule %r of %r fired %s (due %d)", name, action, reply.run_id, due_ms)
        elif reply.status in (Status.NO_ACTION, Status.BAD_SETTING):
            raise_refusal(reply.status, keys, "schedule")
        elif reply.status == Status.OUT_OF_RANGE:
            # the next occurrence is not after due
            log.warning(
                "schedule %r of %r: next occurrence %d is not after its due time %d; "
                "not fired (remove and set the schedule again)",
                name,
                action,
                following,
                due_ms,
            )
    return created


async def _set_aside(session: Session, keys: ActionKeys, name: str, raw: bytes, why: str) -> None:
    """Set aside schedule ``name``, which cannot be evaluated here (``why``), into the
    action's quarantine while it still holds ``raw``, so the action's other schedules
    stay due; logged once, by the caller that set it aside."""
    why = f"cannot be evaluated: {why}"[:1000]
    reply = await SCHEDULE_QUARANTINE(session, keys, [name, raw, why])
    if reply.status == Status.OK:
        warn_set_aside(scope_of(keys), [SetAside("schedule", name, why)])


def schedule_due_after(raw: bytes, now_ms: int) -> int:
    """The first occurrence after ``now_ms`` of the schedule stored as ``raw`` (to put
    one set aside back); :class:`ValidationError` saying why when it cannot be
    evaluated here (a record that does not decode, a time zone this host lacks)."""
    try:
        schedule = _decode("", "", 0, raw)
        return _occurrence_after(schedule.cron, schedule.every, schedule.timezone, now_ms, now_ms)
    except ValidationError:
        raise
    except Exception as exc:
        raise ValidationError(
            f"the schedule cannot be evaluated on this host ({type(exc).__name__}: {exc}); "
            "fix what it needs (install the time zone: pip install tzdata, or the 'cron' "
            "extra) or pass a fixed record"
        ) from None


__all__ = [
    "FIRE_BATCH",
    "MIN_INTERVAL",
    "Missed",
    "Schedule",
    "ScheduleDeclaration",
    "check_cron",
    "check_missed",
    "check_spec",
    "check_timezone",
    "fire_due",
    "list_schedules",
    "remove_schedule",
    "schedule_due_after",
]
