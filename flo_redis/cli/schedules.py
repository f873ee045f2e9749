"""``flo-redis schedules list|show|pause|resume|trigger|remove``: each action's schedules,
with their next and last occurrences, paused or not, and those set aside because they
could not be evaluated (:mod:`flo_redis.ops.schedule_board`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import click

from flo_redis.actions.schedule_times import interval_ms
from flo_redis.actions.schedules import Schedule
from flo_redis.cli import _ops as ops
from flo_redis.cli import _tables as tables
from flo_redis.cli._names import Names, unknown
from flo_redis.cli._render import say
from flo_redis.client import FloClient
from flo_redis.ops.schedule_board import ScheduleBoard, SetAsideSchedule, schedule_board

T = TypeVar("T")


def register(group: click.Group) -> None:
    group.add_command(schedules)


@click.group("schedules")
def schedules() -> None:
    """See each action's schedules; pause, resume, trigger or remove one."""


def _at(ms: int, now_ms: int) -> str:
    """When ``ms`` is, for people: 'in 4s', '3m ago', '-' for never."""
    if not ms:
        return "-"
    return f"in {ops.age(now_ms, ms)}" if ms > now_ms else f"{ops.age(ms, now_ms)} ago"


def _state(schedule: Schedule) -> str:
    return "paused" if schedule.paused else "active"


def schedule_json(schedule: Schedule) -> dict[str, Any]:
    """A schedule as ``--json`` prints it: every field, the interval in ms."""
    every_ms = None if schedule.every is None else interval_ms(schedule.every)
    fields = ops.plain({f: getattr(schedule, f) for f in _FIELDS})
    return {**fields, "every_ms": every_ms, "spec": schedule.spec}


def _aside_json(entry: SetAsideSchedule) -> dict[str, Any]:
    r = entry.record
    return {"action": entry.action, "name": r.key, "entry_id": r.id, "why": r.reason,
            "set_aside_ms": r.at_ms}  # fmt: skip


_FIELDS = tuple(f for f in Schedule.__dataclass_fields__ if f != "every")


@ops.list_command(schedules)
@click.option("--action", default=None, help="Only this action's schedules.")
def list_schedules(url: str, namespace: str, as_json: bool, action: str | None) -> None:
    """Every schedule, by action then next occurrence: its spec, whether it is paused,
    its next and last occurrence; then the schedules set aside (they fire no more until
    replayed: `flo-redis quarantine list --action ACTION`)."""
    board = ops.with_client(
        url, namespace, lambda client: schedule_board(client, action), Names(action=action)
    )
    if as_json:
        ops.print_json(
            {
                "now_ms": board.now_ms,
                "schedules": [schedule_json(s) for s in board.schedules],
                "set_aside": [_aside_json(e) for e in board.set_aside],
            }
        )
        return
    now = board.now_ms
    tables.console().print(
        tables.table(
            f"Schedules in {namespace!r}",
            ["action", "schedule", "spec", "state", "next", "last", "last run"],
            [
                (
                    s.action,
                    s.name,
                    s.spec,
                    _state(s),
                    _at(s.next_due_ms, now),
                    _at(s.last_due_ms, now),
                    s.last_run_id or "-",
                )
                for s in board.schedules
            ],
            wrap=["spec"],
            drop=["last run", "last"],
        )
    )
    if not board.schedules:
        say("no schedules" + (f" for action {action!r}" if action else ""))
    _print_set_aside(board)


def _print_set_aside(board: ScheduleBoard) -> None:
    if not board.set_aside:
        return
    tables.console().print(
        tables.table(
            "Set aside: cannot be evaluated, fire no more until replayed",
            ["action", "schedule", "entry", "set aside", "why"],
            [
                (
                    e.action,
                    e.record.key,
                    e.record.id,
                    _at(e.record.at_ms, board.now_ms),
                    e.record.reason,
                )
                for e in board.set_aside
            ],
            wrap=["why"],
            drop=["set aside", "entry"],
        )
    )
    say("replay one with: flo-redis quarantine replay --action ACTION ENTRY")


async def _checked(client: FloClient, action: str, name: str | None) -> str:
    """The schedule name meant (default: the action's); exit 1 with "did you mean" when
    the action has no such schedule, saying so when it was set aside."""
    label = action if name is None else name
    board = await schedule_board(client, action)
    known = board.names(action)
    if label in known:
        return label
    for entry in board.set_aside:
        if entry.record.key == label:
            raise click.ClickException(
                f"schedule {label!r} of action {action!r} was set aside "
                f"({entry.record.reason}); see flo-redis quarantine list --action {action}"
            )
    where = f" of action {action!r} in namespace {client.namespace!r}"
    raise unknown("schedule", label, where, known)


def _show(schedule: Schedule, now_ms: int) -> None:
    lines = [
        ("schedule", f"{schedule.name} (action {schedule.action})"),
        ("spec", schedule.spec),
        ("missed", schedule.missed.value),
        ("state", _state(schedule)),
        ("held" if schedule.paused else "next", _at(schedule.next_due_ms, now_ms)),
        ("last", _at(schedule.last_due_ms, now_ms)),
        ("last run", schedule.last_run_id or "-"),
        ("triggered", _at(schedule.triggered_ms, now_ms)),
        ("triggered run", schedule.triggered_run_id or "-"),
        ("input", f"{len(schedule.input)} bytes"),
    ]
    for key, value in lines:
        say(f"{key + ':':15}{value}")


def _target(command: Callable[..., Any]) -> Callable[..., Any]:
    """The connection options, ``--json`` and ``ACTION [SCHEDULE]``: the schedule, named
    after its action when not given (:func:`_on_schedule` finds it)."""
    command = click.argument("schedule", required=False)(command)
    command = click.argument("action")(command)
    return ops.connection_options(ops.json_option(command))


def _on_schedule(
    url: str,
    namespace: str,
    action: str,
    schedule: str | None,
    act: Callable[[FloClient, str], Awaitable[T]],
) -> T:
    """What ``act(client, name)`` answers for the schedule meant (:func:`_checked`: exit
    1 with "did you mean" when the action has no such schedule)."""

    async def run(client: FloClient) -> T:
        return await act(client, await _checked(client, action, schedule))

    return ops.with_client(url, namespace, run, Names(action=action))


@schedules.command("show")
@_target
def show(url: str, namespace: str, as_json: bool, action: str, schedule: str | None) -> None:
    """One schedule: its spec, state, next and last occurrence, last trigger."""

    async def read(client: FloClient, label: str) -> tuple[Schedule, int]:
        found = await client.action.get_schedule(action, label)
        return found, await client.server_time_ms()

    found, now_ms = _on_schedule(url, namespace, action, schedule, read)
    if as_json:
        ops.print_json({"now_ms": now_ms, **schedule_json(found)})
    else:
        _show(found, now_ms)


def _steer(verb: str, about: str) -> None:
    """``schedules <verb> ACTION [SCHEDULE]``: pause or resume, then say where it is."""

    @schedules.command(verb, help=about)
    @_target
    def step(url: str, namespace: str, as_json: bool, action: str, schedule: str | None) -> None:
        async def run(client: FloClient, label: str) -> tuple[Schedule, int]:
            steer = getattr(client.action, f"{verb}_schedule")
            return await steer(action, label), await client.server_time_ms()

        found, now_ms = _on_schedule(url, namespace, action, schedule, run)
        held = "holds" if found.paused else "next"
        ops.report(
            as_json,
            f"schedule {found.name} of {action} {_state(found)}; "
            f"{held} occurrence {_at(found.next_due_ms, now_ms)}",
            **schedule_json(found),
        )


_steer("pause", "Pause a schedule: it creates no run until resumed.")
_steer(
    "resume",
    "Resume a paused schedule at the occurrence it held; occurrences passed while it was "
    "paused fire as its missed policy says (once: one run, late; all: each once).",
)


@schedules.command("trigger")
@_target
@click.option("--idempotency-key", default=None, help="Trigger once for this key.")
def trigger(
    url: str,
    namespace: str,
    as_json: bool,
    action: str,
    schedule: str | None,
    idempotency_key: str | None,
) -> None:
    """Create one run now from the schedule's input; its next occurrence stays."""

    async def run(client: FloClient, label: str) -> str:
        return await client.action.trigger_schedule(action, label, idempotency_key=idempotency_key)

    run_id = _on_schedule(url, namespace, action, schedule, run)
    ops.report(as_json, f"created run {run_id}", run_id=run_id)


@schedules.command("remove")
@_target
@ops.yes_option
def remove(
    url: str, namespace: str, as_json: bool, yes: bool, action: str, schedule: str | None
) -> None:
    """Remove a schedule for good (runs it created stay)."""

    async def run(client: FloClient, label: str) -> str:
        ops.confirm(yes, f"Remove schedule {label!r} of action {action!r}?")
        await client.action.unschedule(action, label)
        return label

    label = _on_schedule(url, namespace, action, schedule, run)
    ops.report(as_json, f"removed schedule {label} of {action}", removed=label, action=action)


__all__ = ["register", "schedule_json"]
