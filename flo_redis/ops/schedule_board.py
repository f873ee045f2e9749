"""Every schedule of a namespace as an operator looks at it (the ``flo-redis schedules``
command and the dashboard's schedules page): each schedule with its next and last
occurrence and whether it is paused, and the schedules set aside because they could not
be evaluated (their record does not decode, or names a time zone the workers do not
know), each with why — a schedule set aside fires no more until it is replayed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from flo_redis.actions.schedules import Schedule
from flo_redis.ops.discovery import action_names
from flo_redis.quarantine import KEPT, ActionQuarantine, QuarantinedRecord

if TYPE_CHECKING:
    from flo_redis.client import FloClient


@dataclass(frozen=True, slots=True)
class SetAsideSchedule:
    """A schedule of ``action`` set aside into its quarantine (``record.key`` is its
    name, ``record.reason`` why, ``record.id`` the entry to replay or delete)."""

    action: str
    record: QuarantinedRecord


@dataclass(frozen=True, slots=True)
class ScheduleBoard:
    """The schedules of the actions looked at (by action, then next occurrence; paused
    ones after the active ones of their action), those set aside, and Redis's time."""

    schedules: tuple[Schedule, ...]
    set_aside: tuple[SetAsideSchedule, ...]
    now_ms: int

    def names(self, action: str) -> list[str]:
        """The names of ``action``'s schedules (for "did you mean")."""
        return [s.name for s in self.schedules if s.action == action]


async def schedule_board(client: FloClient, action: str | None = None) -> ScheduleBoard:
    """The schedules of ``action`` (of every registered action when None), with the
    schedules set aside from each action's quarantine (the newest :data:`KEPT`)."""
    actions = [action] if action is not None else list(await action_names(client))
    schedules: list[Schedule] = []
    aside: list[SetAsideSchedule] = []
    for name in actions:
        schedules += await client.action.schedules(name)
        page = await client.quarantine.list(ActionQuarantine(name), limit=KEPT)
        aside += [SetAsideSchedule(name, r) for r in page.records if r.kind == "schedule"]
    return ScheduleBoard(tuple(schedules), tuple(aside), await client.server_time_ms())


__all__ = ["ScheduleBoard", "SetAsideSchedule", "schedule_board"]
