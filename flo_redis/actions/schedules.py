"""Schedules: runs of an action created on a cron expression or a fixed interval.

A schedule lives in its action's queue (``schedules``, with ``schedule_due`` while it is
active or ``schedule_paused`` while it is paused, and ``schedule_last``: the runs it last
created; one hash slot), so firing one is a single script (``lua/schedule_fire.lua``): it
creates the run of the due occurrence — the occurrence is the run's idempotency key — and
advances the schedule to the next occurrence, atomically, refusing an occurrence not yet
due by server time and an advance from a caller that read an older state. The next
occurrence is computed here, in Python (:mod:`flo_redis.actions.schedule_times`), from
the occurrence fired, never from the time it was fired at: an interval's occurrences
are ``anchor + k * interval`` on Redis's clock, and a late firing moves none of the
later ones.

Every worker serving an action fires its due schedules from its reaper: at each one's
occurrence (the fire answers when the next is due), and in its upkeep about once a
second (schedules set by others), so schedules keep firing while any worker is up and no
leader exists. A schedule the upkeep cannot evaluate (its record does not decode, or
names a time zone this host does not know) is set aside into the action's quarantine,
logged once at WARNING, and the action's other schedules fire on. Pausing, resuming and
triggering a schedule are :mod:`flo_redis.actions.schedule_steering`'s.
"""

from __future__ import annotations

import builtins
import dataclasses
import enum
import logging
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING

from flo_redis._wire.aside import SetAside, scope_of, warn_set_aside, warn_unreadable
from flo_redis._wire.checks import check_bytes
from flo_redis._wire.codec import BadRecord, pack, text, unpack_record
from flo_redis._wire.gateway import (
    SCHEDULE_DUE,
    SCHEDULE_FIRE,
    SCHEDULE_LIST,
    SCHEDULE_QUARANTINE,
    SCHEDULE_REMOVE,
    SCHEDULE_SET,
)
from flo_redis._wire.keys import ActionKeys, action_keys, check_name, namespace_keys, run_id_prefix
from flo_redis._wire.refusals import not_registered, raise_refusal
from flo_redis._wire.schedule_replies import ListedRow
from flo_redis._wire.status import Status
from flo_redis.actions.schedule_times import (
    MIN_INTERVAL,
    check_cron,
    check_spec,
    check_timezone,
    interval_ms,
    occurrence_after,
)
from flo_redis.errors import ServerError, ValidationError, server_error
from flo_redis.types import Ran, Reason, StatusCode

if TYPE_CHECKING:
    from flo_redis._session.session import Session

log = logging.getLogger("flo_redis.schedules")

FIRE_BATCH = 100
"""Due schedules of one action read (and fired, one script call each) per upkeep."""
LIST_LIMIT = 1000
"""Schedules one action may hold as listed by :func:`list_schedules`."""


class Missed(str, enum.Enum):
    """What a schedule does about occurrences that passed while no worker was up, or
    while it was paused.

    ``ONCE`` (the default) fires the oldest missed occurrence once, late, and skips to
    the next occurrence after now; ``ALL`` fires every missed occurrence, each once."""

    ONCE = "once"
    ALL = "all"


@dataclass(frozen=True, slots=True)
class Schedule:
    """A named schedule of ``action``: a ``cron`` expression or an ``every`` interval,
    evaluated in ``timezone``; each occurrence creates one run with ``input``.
    ``next_due_ms`` is the next occurrence (server time, ms since the epoch); while
    ``paused``, the one it holds until resumed. ``last_due_ms`` is the last occurrence
    fired (0: none yet), ``last_run_id`` its run and ``last_fired_ms`` when that run was
    created; ``triggered_ms`` and ``triggered_run_id`` tell the last run made by hand
    (:meth:`~flo_redis.actions.operations.ActionOperations.trigger_schedule`)."""

    action: str
    name: str
    cron: str | None
    every: timedelta | None
    timezone: str
    input: bytes
    missed: Missed
    next_due_ms: int
    paused: bool = False
    last_due_ms: int = 0
    last_run_id: str = ""
    last_fired_ms: int = 0
    triggered_ms: int = 0
    triggered_run_id: str = ""

    def following(self, due_ms: int, now_ms: int) -> int:
        """The occurrence after ``due_ms`` (for ``Missed.ONCE``, the first after now),
        counted from ``due_ms``: the phase never moves."""
        after = due_ms if self.missed is Missed.ALL else max(due_ms, now_ms)
        return occurrence_after(self.cron, self.every, self.timezone, due_ms, after)

    @property
    def spec(self) -> str:
        """The schedule as people read it: ``*/5 * * * * (Europe/Paris)``, ``every 1h30m``."""
        if self.every is not None:
            return f"every {_span(interval_ms(self.every))}"
        return f"{self.cron} ({self.timezone})"


def _span(ms: int) -> str:
    """An interval for people: ``5s``, ``1h30m``, ``1d``, ``1.5s`` (to the millisecond)."""
    seconds, rest = divmod(ms, 1000)
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            parts.append(f"{seconds // size}{unit}")
            seconds %= size
    if seconds or rest or not parts:
        parts.append(f"{seconds}.{rest:03d}".rstrip("0").rstrip(".") + "s")
    return "".join(parts)


def _record(
    cron: str | None, every: timedelta | None, tz: str, data: bytes, missed: Missed
) -> bytes:
    every_ms = 0 if every is None else interval_ms(every)
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


def decode_listed(action: str, row: ListedRow) -> Schedule:
    """A schedule as ``schedule_list`` read it; the errors of :func:`_decode` for a record
    that does not decode. A note that does not decode only remembers: read as none."""
    schedule = _decode(action, row.name, row.next_ms, row.record)
    try:
        note = unpack_record(row.note) if row.note else {}
    except BadRecord:
        note = {}
    return dataclasses.replace(
        schedule,
        paused=row.paused,
        last_due_ms=int(note.get("o", 0)),
        last_run_id=text(note.get("r")) or "",
        last_fired_ms=int(note.get("a", 0)),
        triggered_ms=int(note.get("t", 0)),
        triggered_run_id=text(note.get("u")) or "",
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
        action. Setting an identical schedule again keeps its next occurrence, and a
        paused schedule stays paused. Refuses a bad cron expression, interval, time
        zone or input (:class:`ValidationError`) and an action that is not registered
        (:class:`NotFoundError`) before anything is written."""
        keys = action_keys(session.get_namespace(namespace), self.action)
        cron, every = check_spec(self.spec)
        check_timezone(self.timezone)
        label = check_name("schedule name", self.action if self.name is None else self.name)
        data = check_bytes("input", self.input, session.max_payload_bytes)
        now_ms = (await SCHEDULE_DUE(session, keys, [1, 1])).now_ms
        first = occurrence_after(cron, every, self.timezone, now_ms, now_ms)
        record = _record(cron, every, self.timezone, data, self.missed)
        reply = await SCHEDULE_SET(session, keys, [label, record, first])
        if reply.status == Status.NO_ACTION:
            raise not_registered(keys)
        if reply.changed:
            return Schedule(
                self.action, label, cron, every, self.timezone, data, self.missed, first,
                paused=reply.paused,
            )  # fmt: skip
        return await get_schedule(session, self.action, label, namespace)


def no_schedule(action: str, label: str) -> ServerError:
    """The error for a schedule ``label`` that ``action`` does not have."""
    return server_error(
        StatusCode.NOT_FOUND,
        Reason.NOT_FOUND,
        f"action {action!r} has no schedule {label!r}; list them with action.schedules() "
        "or `flo-redis schedules list`",
        Ran.NO,
    )


def schedule_label(action: str, name: str | None) -> str:
    """The schedule name meant: ``name``, or the action's own name when None; checked."""
    return check_name("schedule name", action if name is None else name)


async def get_schedule(
    session: Session, action: str, name: str | None = None, namespace: str | None = None
) -> Schedule:
    """The schedule ``name`` (default: the action's name) of ``action``, active or
    paused, with what it last did; :class:`NotFoundError` when there is none (or its
    record does not decode: a worker's upkeep sets it aside)."""
    keys = action_keys(session.get_namespace(namespace), action)
    label = schedule_label(action, name)
    listed = await SCHEDULE_LIST(session, keys, [1, label])
    for row in listed.rows:
        try:
            return decode_listed(action, row)
        except Exception as exc:
            _unreadable(keys, row.name, exc)
    raise no_schedule(action, label)


def _unreadable(keys: ActionKeys, name: str, exc: Exception) -> None:
    warn_unreadable(
        ("schedule", keys.tag, name),
        f"schedule {name!r} of action {keys.action!r} (namespace {keys.namespace!r}): its "
        f"record does not decode ({type(exc).__name__}: {exc}); left out",
    )


async def list_schedules(
    session: Session, action: str | None = None, namespace: str | None = None
) -> list[Schedule]:
    """The schedules of ``action`` (of every registered action when None), by action,
    then next occurrence, the paused ones after the active ones."""
    ns = session.get_namespace(namespace)
    if action is None:
        raw = await session.redis.zrange(namespace_keys(ns).actions, 0, -1)
        actions = [text(a) or "" for a in raw]
    else:
        actions = [action]
    found: builtins.list[Schedule] = []
    for name in actions:
        keys = action_keys(ns, name)
        listed = await SCHEDULE_LIST(session, keys, [LIST_LIMIT, ""])
        for row in listed.rows:
            try:
                found.append(decode_listed(name, row))
            except Exception as exc:  # left out: a worker's upkeep sets it aside
                _unreadable(keys, row.name, exc)
    return found


async def remove_schedule(
    session: Session, action: str, name: str | None = None, namespace: str | None = None
) -> None:
    """Remove the schedule ``name`` (default: the action's name) of ``action``, active
    or paused; runs it already created stay. :class:`NotFoundError` when there is no
    such schedule."""
    keys = action_keys(session.get_namespace(namespace), action)
    label = schedule_label(action, name)
    reply = await SCHEDULE_REMOVE(session, keys, [label])
    if reply.status == Status.NOT_FOUND:
        raise no_schedule(action, label)


@dataclass(frozen=True, slots=True)
class FireResult:
    """What one :func:`fire_schedules` did: runs ``created``, and in how many ms (on
    Redis's clock) the action's next occurrence is due (0: one is due already; -1: it
    has no active schedule)."""

    created: int
    next_in_ms: int


async def fire_schedules(session: Session, action: str, namespace: str | None = None) -> FireResult:
    """Fire every occurrence of ``action``'s schedules due by server time (at most
    :data:`FIRE_BATCH` schedules, one script call each, one occurrence each). Safe from
    any number of workers at once: each occurrence creates one run."""
    keys = action_keys(session.get_namespace(namespace), action)
    due = await SCHEDULE_DUE(session, keys, [FIRE_BATCH, 1])
    prefix = run_id_prefix(action)
    created = 0
    soonest = due.next_ms or None
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
            continue
        if reply.status in (Status.NO_ACTION, Status.BAD_SETTING):
            raise_refusal(reply.status, keys, "schedule")
        if reply.status == Status.OUT_OF_RANGE:
            log.warning(
                "schedule %r of %r: next occurrence %d is not after its due time %d; "
                "not fired (remove and set the schedule again)",
                *(name, action, following, due_ms),
            )
            continue
        if reply.status == Status.OK and not reply.existing:
            created += 1
            log.debug("schedule %r of %r fired %s (due %d)", name, action, reply.run_id, due_ms)
        # Fired (here or by another worker: STALE), it is next due at `following`; not
        # due yet by Redis's clock (CONFLICT), at `due_ms`.
        at = due_ms if reply.status == Status.CONFLICT else following
        soonest = at if soonest is None else min(soonest, at)
    next_in = -1 if soonest is None else max(soonest - due.now_ms, 0)
    return FireResult(created, next_in)


async def fire_due(session: Session, action: str, namespace: str | None = None) -> int:
    """:func:`fire_schedules`, answering how many runs were created."""
    return (await fire_schedules(session, action, namespace)).created


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
        return occurrence_after(schedule.cron, schedule.every, schedule.timezone, now_ms, now_ms)
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
    "FireResult",
    "Missed",
    "Schedule",
    "ScheduleDeclaration",
    "check_cron",
    "check_missed",
    "check_spec",
    "check_timezone",
    "fire_due",
    "fire_schedules",
    "get_schedule",
    "list_schedules",
    "remove_schedule",
    "schedule_due_after",
]
