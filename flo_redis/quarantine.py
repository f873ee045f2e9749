"""``client.quarantine``: stored records set aside because they do not decode.

A record that does not decode -- a run, a plain queue's message, a worker's registry
entry, a schedule, a concurrency slot's holder, a stream entry's headers -- stops
nothing: the script (or, for a stream entry's headers and a schedule that cannot be
evaluated, the client) that meets it sets it aside, with its bytes, the payload that
goes with it and why, into the quarantine of where it was, logs it once at WARNING
(``flo_redis.quarantine``), and everything else goes on. Each quarantine is one Redis
stream in the hash slot of what it serves (``keys.py``: ``quarantine``), keeping its
newest 1000 records:

- :class:`ActionQuarantine`: an action's runs, schedules and slot holders;
- :class:`QueueQuarantine`: a plain queue's messages;
- :class:`GroupQuarantine`: a consumer group's entries (one partition at a time);
- :class:`WorkerQuarantine`: a namespace's worker registry.

An operator lists them, puts one back (:meth:`QuarantineOperations.replay`, with the
bytes set aside or fixed ones) or deletes them. Counts, the ``flo-redis`` command, the
exporter and the dashboard show how many each holds.
"""

from __future__ import annotations

import builtins
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from flo_redis._session.session import Operations, Session
from flo_redis._wire import runner
from flo_redis._wire.aside import scope_of
from flo_redis._wire.checks import check_count
from flo_redis._wire.codec import BadRecord, decoded, pack, text
from flo_redis._wire.gateway import (
    ACTION_QUARANTINE_REPLAY,
    GROUP_QUARANTINE_REPLAY,
    QUARANTINE_DELETE,
    QUEUE_QUARANTINE_REPLAY,
    SCHEDULE_DUE,
    WORKER_QUARANTINE_REPLAY,
)
from flo_redis._wire.keys import action_keys, check_name, namespace_keys, queue_keys, stream_keys
from flo_redis._wire.status import Status, refusal
from flo_redis._wire.stream_codec import decode_headers
from flo_redis.actions.runs import read_run
from flo_redis.actions.schedules import schedule_due_after
from flo_redis.errors import ValidationError

KEPT = 1000
"""Records each quarantine keeps: the newest (``lua/lib/record.lua``)."""
MAX_LIST = 1000
"""Records one :meth:`QuarantineOperations.list` call answers at most."""
MAX_DELETE = 1000
"""Records one :meth:`QuarantineOperations.delete` call deletes at most."""
_ENTRY_ID = re.compile(r"[0-9]{1,20}-[0-9]{1,20}")


@dataclass(frozen=True, slots=True)
class QuarantinedRecord:
    """One record set aside: its ``id`` in the quarantine (``"<ms>-<seq>"``, for
    :meth:`~QuarantineOperations.replay` and :meth:`~QuarantineOperations.delete`),
    its ``kind`` (``run``, ``schedule``, ``slot``, ``message``, ``entry``, ``worker``),
    the ``key`` it was stored under (a run id, a schedule name, a slot index, a message
    seq, a stream entry id, a worker id), the ``record`` bytes as they were (for an entry,
    its headers), why it was set aside, the ``payload`` that went with it (a run's input,
    a message's or an entry's payload; empty for the others) and when (server ms)."""

    id: str
    kind: str
    key: str
    record: bytes
    reason: str
    payload: bytes
    at_ms: int


@dataclass(frozen=True, slots=True)
class QuarantinePage:
    """Records set aside, oldest first; ``cursor``: pass it as ``after`` for the next
    page (None: this is the last)."""

    records: tuple[QuarantinedRecord, ...]
    cursor: str | None = None


class _Scope:
    """Where records were set aside: the keys of what the quarantine serves, its name in
    messages, and how one of its records is put back."""

    __slots__ = ()

    def keys(self, session: Session) -> Any:
        raise NotImplementedError

    def label(self, session: Session) -> str:
        """The quarantine as messages and log lines name it (``action 'resize' in
        namespace 'shop'``)."""
        return scope_of(self.keys(session))[0]

    async def put_back(self, session: Session, entry: QuarantinedRecord, record: bytes) -> None:
        raise NotImplementedError


@dataclass(frozen=True, slots=True)
class ActionQuarantine(_Scope):
    """The quarantine of action ``action``'s queue: its runs (each with its input),
    schedules and concurrency slot holders."""

    action: str
    namespace: str | None = None

    def keys(self, session: Session) -> Any:
        return action_keys(session.get_namespace(self.namespace), self.action)

    async def put_back(self, session: Session, entry: QuarantinedRecord, record: bytes) -> None:
        """A run waits again (or goes back among the finished runs it was one of); a
        schedule is due at its next occurrence after now, as evaluated here. A slot is
        not put back: it is free."""
        keys = self.keys(session)
        due_ms = 0
        if entry.kind == "run":
            try:
                read_run(entry.key, record)
            except BadRecord as exc:
                raise _still_bad(entry, exc) from None
        elif entry.kind == "schedule":
            now_ms = (await SCHEDULE_DUE(session, keys, [1, 1])).now_ms
            due_ms = schedule_due_after(record, now_ms)
        else:
            raise ValidationError(
                f"{entry.kind} {entry.key!r} is not put back: a slot whose record did not "
                "decode was taken as free; delete it from the quarantine"
            )
        reply = await ACTION_QUARANTINE_REPLAY(session, keys, [entry.id, record, due_ms])
        _check_replay(reply.status, entry, self.label(session))


@dataclass(frozen=True, slots=True)
class QueueQuarantine(_Scope):
    """The quarantine of plain queue ``queue``: its messages (each with its payload)."""

    queue: str
    namespace: str | None = None

    def keys(self, session: Session) -> Any:
        return queue_keys(session.get_namespace(self.namespace), self.queue)

    async def put_back(self, session: Session, entry: QuarantinedRecord, record: bytes) -> None:
        """The message is ready again (or a dead letter again, if it was one)."""
        keys = self.keys(session)
        reply = await QUEUE_QUARANTINE_REPLAY(session, keys, [entry.id, record])
        _check_replay(reply.status, entry, self.label(session))


@dataclass(frozen=True, slots=True)
class GroupQuarantine(_Scope):
    """The quarantine of consumer group ``group`` of ``stream`` (partition
    ``partition``): entries whose headers do not decode, each with its payload."""

    stream: str
    group: str
    partition: int = 0
    namespace: str | None = None

    def keys(self, session: Session) -> Any:
        check_name("group name", self.group)
        part = stream_keys(session.get_namespace(self.namespace), self.stream, self.partition)
        return part, part.group(self.group)

    async def put_back(self, session: Session, entry: QuarantinedRecord, record: bytes) -> None:
        """The entry is appended again to the stream as a new record, with ``record``
        as its headers (b"": none): every group reads it again."""
        try:
            decode_headers(record)
        except BadRecord as exc:
            raise _still_bad(entry, exc, "pass record=b'' to append it without headers") from None
        keys = self.keys(session)
        reply = await GROUP_QUARANTINE_REPLAY(session, keys, [entry.id, record])
        _check_replay(reply.status, entry, self.label(session))


@dataclass(frozen=True, slots=True)
class WorkerQuarantine(_Scope):
    """The quarantine of a namespace's worker registry. A worker whose record was set
    aside registers again by itself at its next heartbeat or poll."""

    namespace: str | None = None

    def keys(self, session: Session) -> Any:
        return namespace_keys(session.get_namespace(self.namespace))

    async def put_back(self, session: Session, entry: QuarantinedRecord, record: bytes) -> None:
        """The worker's record is back in the registry (refused if it registered again)."""
        keys = self.keys(session)
        reply = await WORKER_QUARANTINE_REPLAY(session, keys, [entry.id, record])
        _check_replay(reply.status, entry, self.label(session))


Quarantine = ActionQuarantine | QueueQuarantine | GroupQuarantine | WorkerQuarantine
"""Where records are set aside: one of the four quarantines."""


def _still_bad(entry: QuarantinedRecord, exc: Exception, fix: str = "") -> ValidationError:
    return ValidationError(
        f"{entry.kind} {entry.key!r} still does not decode ({exc}); pass a fixed record "
        f"to replay{', or ' + fix if fix else ''}"
    )


def _check_replay(status: int, entry: QuarantinedRecord, where: str) -> None:
    """Raise the refusal of a replay of ``entry`` (of the quarantine named ``where``)."""
    if status == Status.OK:
        return
    what = f"{entry.kind} {entry.key!r} (quarantine entry {entry.id}) of {where}"
    refused: dict[int, str] = {
        Status.NOT_FOUND: "is no longer in the quarantine (replayed or deleted)",
        Status.CONFLICT: f"is not put back: a {entry.kind} of that name exists again; delete "
        "the quarantined one, or the live one first",
        Status.BAD_RECORD: "still does not decode; pass a fixed record to replay",
    }
    why = refused.get(status, f"cannot be put back here (refused: {Status(status).name})")
    if status in (Status.NOT_FOUND, Status.CONFLICT):
        raise refusal(status, f"{what} {why}")
    raise ValidationError(f"{what} {why}")


_SCOPES = (ActionQuarantine, QueueQuarantine, GroupQuarantine, WorkerQuarantine)


def _scope(where: object) -> _Scope:
    if not isinstance(where, _SCOPES):
        raise ValidationError(
            "where must be an ActionQuarantine, QueueQuarantine, GroupQuarantine or "
            f"WorkerQuarantine, got {type(where).__name__}"
        )
    return where


def _held(scope: _Scope, session: Session) -> Any:
    """The keys whose ``quarantine`` stream holds what ``scope`` set aside."""
    keys = scope.keys(session)
    return keys[1] if isinstance(keys, tuple) else keys


def _entry_id(what: str, value: object) -> str:
    if not isinstance(value, str) or not _ENTRY_ID.fullmatch(value):
        raise ValidationError(
            f"{what} must be a quarantine entry id such as '1733451234567-0' (as listed), "
            f"got {value!r}"
        )
    return value


def _record(entry_id: bytes | str, fields: dict[Any, Any]) -> QuarantinedRecord:
    entry = decoded(entry_id)
    return QuarantinedRecord(
        id=entry,
        kind=text(fields.get(b"k")) or "",
        key=text(fields.get(b"f")) or "",
        record=bytes(fields.get(b"r", b"")),
        reason=text(fields.get(b"why")) or "",
        payload=bytes(fields.get(b"p", b"")),
        at_ms=int(entry.partition("-")[0]),
    )


class QuarantineOperations(Operations):
    """``client.quarantine``: list, count, replay and delete records set aside."""

    async def list(
        self, where: Quarantine, limit: int = 100, after: str | None = None
    ) -> QuarantinePage:
        """Up to ``limit`` (1..1000) records set aside in ``where``, oldest first, after
        the entry id ``after`` (None: from the oldest). Read only."""
        scope = _scope(where)
        check_count("limit", limit, 1, MAX_LIST)
        start = "-" if after is None else "(" + _entry_id("after", after)
        key = _held(scope, self._session).quarantine
        with runner.redis_errors("quarantine list"):
            rows: Any = await self._session.redis.xrange(key, start, "+", count=limit + 1)
        records = tuple(_record(i, f) for i, f in rows[:limit])
        more = len(rows) > limit
        return QuarantinePage(records, records[-1].id if more and records else None)

    async def count(self, where: Quarantine) -> int:
        """How many records ``where`` holds set aside now (at most :data:`KEPT`: the
        newest are kept)."""
        scope = _scope(where)
        key = _held(scope, self._session).quarantine
        with runner.redis_errors("quarantine count"):
            return int(await self._session.redis.xlen(key))

    async def replay(self, where: Quarantine, entry_id: str, record: bytes | None = None) -> None:
        """Put the record ``entry_id`` back where it was set aside from, with the bytes
        set aside or, given ``record``, fixed ones (for a stream entry, its headers as a
        msgpack map; b"" for none), and take it out of the quarantine, in one script.
        What putting back means for each kind is the scope's (:class:`ActionQuarantine`
        and its siblings). :class:`ValidationError` when the record still does not
        decode (or a schedule cannot be evaluated here), :class:`NotFoundError` when the
        entry is gone, :class:`ConflictError` when a live record holds its place."""
        scope = _scope(where)
        entry_id = _entry_id("entry_id", entry_id)
        if record is not None and not isinstance(record, bytes):
            raise ValidationError(f"record must be bytes, got {type(record).__name__}")
        key = _held(scope, self._session).quarantine
        with runner.redis_errors("quarantine replay"):
            rows: Any = await self._session.redis.xrange(key, entry_id, entry_id)
        if not rows:
            raise refusal(
                Status.NOT_FOUND,
                f"no record {entry_id} is set aside in the {scope.label(self._session)}; "
                "list them with client.quarantine.list",
            )
        entry = _record(*rows[0])
        await scope.put_back(self._session, entry, entry.record if record is None else record)

    async def delete(self, where: Quarantine, entry_ids: Sequence[str]) -> int:
        """Delete records set aside, for good (at most 1000 a call); returns how many
        were there."""
        scope = _scope(where)
        if isinstance(entry_ids, str) or not isinstance(entry_ids, Sequence):
            raise ValidationError("entry_ids must be a list of quarantine entry ids")
        if len(entry_ids) > MAX_DELETE:
            raise ValidationError(f"at most {MAX_DELETE} entry ids per delete")
        ids: builtins.list[str] = [_entry_id(f"entry_ids[{i}]", e) for i, e in enumerate(entry_ids)]
        reply = await QUARANTINE_DELETE(self._session, _held(scope, self._session), [pack(ids)])
        return reply.value


__all__ = [
    "ActionQuarantine",
    "GroupQuarantine",
    "Quarantine",
    "QuarantineOperations",
    "QuarantinePage",
    "QuarantinedRecord",
    "QueueQuarantine",
    "WorkerQuarantine",
]
