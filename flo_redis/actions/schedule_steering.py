"""Steering schedules: ``client.action``'s schedule calls — set, list, read one, pause,
resume, trigger and remove — each change one script (``lua/schedule_*.lua``).

A paused schedule leaves the due schedules and creates no run until resumed; it holds
the occurrence it was waiting for, and resuming puts it back there, so the occurrences
that passed meanwhile are missed ones and its ``missed`` policy decides what they fire
(``once``: the oldest, once, late; ``all``: each, once) — never more. A trigger creates
one run now from the schedule's input and leaves its next occurrence where it was.
A paused schedule stays paused when a worker declares it again at start.
"""

from __future__ import annotations

import builtins
from datetime import timedelta

from flo_redis._session.session import Operations, Session
from flo_redis._wire.aside import SetAside, scope_of, warn_set_aside
from flo_redis._wire.checks import check_idempotency_key
from flo_redis._wire.gateway import SCHEDULE_PAUSE, SCHEDULE_RESUME, SCHEDULE_TRIGGER
from flo_redis._wire.keys import action_keys, run_id_prefix
from flo_redis._wire.refusals import raise_refusal
from flo_redis._wire.status import Status
from flo_redis.actions.schedules import (
    Missed,
    Schedule,
    ScheduleDeclaration,
    check_missed,
    get_schedule,
    list_schedules,
    no_schedule,
    remove_schedule,
    schedule_label,
)
from flo_redis.errors import ValueTooLargeError


async def pause_schedule(
    session: Session, action: str, name: str | None = None, namespace: str | None = None
) -> Schedule:
    """Pause the schedule (idempotent) and answer it as it is now."""
    return await _steer(session, action, name, namespace, pause=True)


async def resume_schedule(
    session: Session, action: str, name: str | None = None, namespace: str | None = None
) -> Schedule:
    """Resume the schedule (idempotent) and answer it as it is now."""
    return await _steer(session, action, name, namespace, pause=False)


async def _steer(
    session: Session, action: str, name: str | None, namespace: str | None, *, pause: bool
) -> Schedule:
    keys = action_keys(session.get_namespace(namespace), action)
    label = schedule_label(action, name)
    reply = await (SCHEDULE_PAUSE if pause else SCHEDULE_RESUME)(session, keys, [label])
    if reply.status == Status.NOT_FOUND:
        raise no_schedule(action, label)
    return await get_schedule(session, action, label, namespace)


async def trigger_schedule(
    session: Session,
    action: str,
    name: str | None = None,
    *,
    idempotency_key: str | None = None,
    namespace: str | None = None,
) -> str:
    """Create one run of the schedule now, from its input, active or paused; answer
    its run id. Its next occurrence does not move. With ``idempotency_key``, a trigger
    that was already made with that key answers the run it created."""
    keys = action_keys(session.get_namespace(namespace), action)
    label = schedule_label(action, name)
    key = check_idempotency_key(idempotency_key)
    reply = await SCHEDULE_TRIGGER(session, keys, [run_id_prefix(action), label, key])
    if reply.status == Status.NOT_FOUND:
        raise no_schedule(action, label)
    if reply.status == Status.BAD_RECORD:
        warn_set_aside(scope_of(keys), [SetAside("schedule", label, "its record does not decode")])
        raise no_schedule(action, label)
    if reply.status == Status.TOO_LARGE:
        raise ValueTooLargeError(
            f"the input of schedule {label!r} is over the payload limit of action "
            f"{action!r} ({reply.run_id} bytes); set the schedule again with a smaller "
            "input, or register the action with a larger max_payload_bytes"
        )
    if reply.status != Status.OK:
        raise_refusal(reply.status, keys, "schedule trigger")
    return reply.run_id


class ScheduleOperations(Operations):
    """The schedule half of ``client.action``."""

    async def schedule(
        self,
        action: str,
        cron_or_interval: str | timedelta,
        *,
        input: bytes = b"",
        name: str | None = None,
        timezone: str = "UTC",
        missed: Missed | str = Missed.ONCE,
        namespace: str | None = None,
    ) -> Schedule:
        """Run ``action`` on a cron expression (in ``timezone``) or every interval, each
        occurrence exactly once whichever workers are up. ``name`` (default: the
        action's name) names it for :meth:`unschedule`; setting the same name again
        replaces it (a paused one stays paused). ``missed``: what happens to occurrences
        passed while no worker ran or while it was paused
        (:class:`~flo_redis.actions.schedules.Missed`). :class:`ValidationError` for a bad
        cron expression, interval or time zone, :class:`NotFoundError` for an action that
        is not registered, both before anything is written."""
        declared = ScheduleDeclaration(
            action, cron_or_interval, name, input, timezone, check_missed(missed)
        )
        return await declared.apply(self._session, namespace)

    async def schedules(
        self, action: str | None = None, namespace: str | None = None
    ) -> builtins.list[Schedule]:
        """The schedules of ``action``, or of every registered action, with their next
        and last occurrences and whether each is paused."""
        return await list_schedules(self._session, action, namespace)

    async def get_schedule(
        self, action: str, name: str | None = None, namespace: str | None = None
    ) -> Schedule:
        """The schedule ``name`` (default: the action's name) of ``action``;
        :class:`NotFoundError` when there is none."""
        return await get_schedule(self._session, action, name, namespace)

    async def pause_schedule(
        self, action: str, name: str | None = None, namespace: str | None = None
    ) -> Schedule:
        """Pause a schedule: it creates no run until :meth:`resume_schedule`. Pausing a
        paused one changes nothing. :class:`NotFoundError` when there is no such
        schedule."""
        return await pause_schedule(self._session, action, name, namespace)

    async def resume_schedule(
        self, action: str, name: str | None = None, namespace: str | None = None
    ) -> Schedule:
        """Resume a paused schedule at the occurrence it held: what passed meanwhile
        fires as its ``missed`` policy says (``once``: one run, late), never a burst
        beyond it. Resuming an active one changes nothing."""
        return await resume_schedule(self._session, action, name, namespace)

    async def trigger_schedule(
        self,
        action: str,
        name: str | None = None,
        *,
        idempotency_key: str | None = None,
        namespace: str | None = None,
    ) -> str:
        """Create one run of the schedule now, from its input, without moving its next
        occurrence (paused or not); answers the run id. :class:`NotFoundError` when
        there is no such schedule."""
        return await trigger_schedule(
            self._session, action, name, idempotency_key=idempotency_key, namespace=namespace
        )

    async def unschedule(
        self, action: str, name: str | None = None, namespace: str | None = None
    ) -> None:
        """Remove the schedule ``name`` of ``action`` (default: the one named after the
        action), active or paused; :class:`NotFoundError` when there is none. Runs it
        created stay."""
        await remove_schedule(self._session, action, name, namespace)


__all__ = [
    "ScheduleOperations",
    "pause_schedule",
    "resume_schedule",
    "trigger_schedule",
]
