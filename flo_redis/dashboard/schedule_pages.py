"""The dashboard's schedules page and its changes: every schedule with its spec, next
and last occurrence, the run it last created (and how that run ended), whether it is
paused, and the schedules set aside because they could not be evaluated, with why;
forms to pause, resume, trigger and remove one, allowed by the guard like every change
(:func:`flo_redis.dashboard.changes._form`: write access, session, CSRF, origin)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from aiohttp import web

from flo_redis.actions.schedules import Schedule
from flo_redis.client import FloClient
from flo_redis.dashboard.changes import _back, _form
from flo_redis.dashboard.render import client_of, render_page
from flo_redis.errors import FloError
from flo_redis.ops.schedule_board import schedule_board
from flo_redis.types import ActionRunStatus

LAST_RUNS_READ = 200  # schedules whose last run's status the page reads, at most


@dataclass(frozen=True)
class ScheduleRow:
    """A schedule and the status of the run its last occurrence created (None: none,
    or that run is gone: retention removed it)."""

    schedule: Schedule
    last_run: ActionRunStatus | None


async def _last_run(client: FloClient, schedule: Schedule) -> ActionRunStatus | None:
    if not schedule.last_run_id:
        return None
    try:
        return await client.action.status(schedule.last_run_id)
    except FloError:  # gone since (retention), or unreadable: the page still shows
        return None


async def schedules(request: web.Request) -> web.StreamResponse:
    client = client_of(request)
    action = request.query.get("action") or None
    board = await schedule_board(client, action)
    shown = board.schedules[:LAST_RUNS_READ]
    runs = await asyncio.gather(*(_last_run(client, s) for s in shown))
    rows = [ScheduleRow(s, r) for s, r in zip(shown, runs, strict=True)]
    rows += [ScheduleRow(s, None) for s in board.schedules[LAST_RUNS_READ:]]
    context = {"rows": rows, "set_aside": board.set_aside, "action": action}
    return await render_page(request, "schedules.html", context)


def _change(call: str, done: str) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """The handler of one change: ``client.action.<call>(action, name)`` from the form,
    then back to the page with the note ``done``."""

    async def change(request: web.Request) -> web.StreamResponse:
        fields = await _form(request)
        step = getattr(client_of(request).action, call)
        await step(fields.get("action", ""), fields.get("name", ""))
        raise _back(fields, done, "/schedules")

    return change


def add_routes(router: web.UrlDispatcher) -> None:
    """The page (``GET /schedules``, ``?action=`` for one action's) and its changes."""
    router.add_get("/schedules", schedules)
    router.add_post("/schedule/pause", _change("pause_schedule", "schedule_paused"))
    router.add_post("/schedule/resume", _change("resume_schedule", "schedule_resumed"))
    router.add_post("/schedule/trigger", _change("trigger_schedule", "schedule_triggered"))
    router.add_post("/schedule/remove", _change("unschedule", "schedule_removed"))


__all__ = ["add_routes"]
