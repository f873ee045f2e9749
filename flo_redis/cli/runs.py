"""``flo-redis runs list|cancel|requeue|purge``: one action's runs by state (``show`` and
``find``: :mod:`.run_view`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable

import click

from flo_redis._wire.keys import action_of_run
from flo_redis.actions.inspect import RunPage, RunState, run_cursor
from flo_redis.actions.runs import FINAL
from flo_redis.cli import _ops as ops
from flo_redis.cli import _tables as tables
from flo_redis.cli import run_view
from flo_redis.cli._names import Names
from flo_redis.cli._render import say
from flo_redis.cli.run_view import short
from flo_redis.client import FloClient
from flo_redis.errors import BadRecordError, ValidationError
from flo_redis.types import ActionRunStatus

STATES = click.Choice([s.value for s in RunState])


def register(group: click.Group) -> None:
    group.add_command(runs)
    runs.add_command(run_view.show)
    runs.add_command(run_view.find)


@click.group("runs")
def runs() -> None:
    """List, show, cancel, re-queue and purge runs."""


def _cursor_given(ctx: click.Context, param: click.Parameter, cursor: str | None) -> str | None:
    """A ``--cursor`` as a page printed it ("<score> <run id>"), read strictly."""
    if cursor:
        try:
            run_cursor(cursor.encode())
        except ValidationError as exc:
            raise click.BadParameter(str(exc)) from None
    return cursor


@ops.list_command(runs)
@click.argument("action")
@click.option("--state", type=STATES, default="pending", show_default=True)
@click.option("--limit", type=click.IntRange(1, 1024), default=20, show_default=True)
@click.option("--cursor", default=None, callback=_cursor_given,
              help="Continue after a previous page.")  # fmt: skip
@run_view.redact_options
def list_runs(
    url: str,
    namespace: str,
    as_json: bool,
    action: str,
    state: str,
    limit: int,
    cursor: str | None,
    redact: str | None,
    redact_keys: str | None,
) -> None:
    """A page of ACTION's runs in one state: waiting runs in the order they will be taken,
    finished ones newest first."""
    hide = run_view.redactor_of(redact, redact_keys)

    async def read(client: FloClient) -> tuple[int, RunPage]:
        page = await client.action.runs(
            action, state, limit=limit, cursor=cursor.encode() if cursor else None
        )
        return await client.server_time_ms(), page

    now_ms, page = ops.with_client(url, namespace, read, Names(action=action))
    page = dataclasses.replace(page, runs=tuple(hide.run(r) for r in page.runs))
    if as_json:
        ops.print_json(page)
        return
    when = "due in" if page.state is RunState.DELAYED else "finished"
    tables.console().print(
        tables.table(
            f"{state} runs of {action!r}",
            ["run", "status", "attempt", "created", when, "worker", "error"],
            [
                (
                    r.run_id,
                    r.status.name,
                    f"{r.attempt}/{r.max_retries}",
                    ops.age(r.created_at_ms, now_ms) + " ago",
                    _when(r, now_ms),
                    r.worker_id,
                    short(r.error_message),
                )
                for r in page.runs
            ],
            wrap=["error"],
            drop=["created", "worker", "attempt"],
        )
    )
    if page.unreadable:
        say(
            f"records that do not decode (set aside at their next claim, report or requeue): "
            f"{', '.join(page.unreadable)}"
        )
    if page.cursor is not None:
        say(f"more: --cursor '{page.cursor.decode()}'")


def _when(run: ActionRunStatus, now_ms: int) -> str:
    if run.due_at_ms is not None:
        return ops.age(now_ms, run.due_at_ms) if run.due_at_ms > now_ms else "now"
    if run.completed_at_ms is not None:
        return ops.age(run.completed_at_ms, now_ms) + " ago"
    return ""


@runs.command("cancel")
@ops.connection_options
@ops.json_option
@ops.yes_option
@click.argument("run_id")
def cancel(url: str, namespace: str, as_json: bool, yes: bool, run_id: str) -> None:
    """Cancel RUN_ID: a waiting or delayed run ends CANCELLED; a running one too, and its
    worker cancels the handler. Exit 1 if it already ended."""

    async def run(client: FloClient) -> tuple[ActionRunStatus, ActionRunStatus]:
        try:
            before = await client.action.status(run_id)
        except BadRecordError:
            # Its record does not decode: the cancel sets it aside into the action's
            # quarantine and says so (BadRecordError, exit 1); nothing is lost.
            await client.action.cancel(run_id)
            raise
        if before.status not in FINAL:
            ops.confirm(yes, f"Cancel run {run_id} ({before.status.name})?")
        await client.action.cancel(run_id)  # a finished run: ConflictError, exit 1
        return before, await client.action.status(run_id)

    before, after = ops.with_client(url, namespace, run)
    if as_json:
        ops.print_json(after)
    else:
        say(f"cancelled {run_id} (it was {before.status.name})")


def _bulk(
    url: str,
    namespace: str,
    as_json: bool,
    action: str,
    step: Callable[[FloClient], Awaitable[tuple[int, int]]],
    done: tuple[str, str],
    **facts: object,
) -> None:
    """Run ``step`` on ACTION, which answers (runs it moved, script calls), and say so:
    "<verb> N <state> run(s) of ACTION in C call(s)" for ``done`` = (verb, state); with
    --json, ``{"action", "<verb>": N, **facts, "calls"}``."""
    verb, state = done
    count, calls = ops.with_client(url, namespace, step, Names(action=action))
    line = f"{verb} {count} {state} run(s) of {action} in {calls} call(s)"
    ops.report(
        as_json,
        line if count else f"no {state} runs of {action}",
        action=action,
        **{verb.replace("-", ""): count},
        **facts,
        calls=calls,
    )


@runs.command("requeue")
@ops.connection_options
@ops.json_option
@ops.yes_option
@click.argument("action")
@click.argument("run_ids", nargs=-1)
def requeue(
    url: str, namespace: str, as_json: bool, yes: bool, action: str, run_ids: tuple[str, ...]
) -> None:
    """Give failed runs of ACTION a fresh set of attempts: the RUN_IDS named, or every
    failed (and timed out) run when none is named."""

    try:
        strangers = [r for r in run_ids if action_of_run(r) != action]
    except ValidationError as exc:
        raise click.BadParameter(str(exc), param_hint="RUN_IDS") from exc
    if strangers:
        raise click.BadParameter(
            f"{', '.join(strangers)} not runs of {action!r}", param_hint="RUN_IDS"
        )

    async def run(client: FloClient) -> tuple[int, int]:
        """(runs re-queued, script calls)"""
        if run_ids:
            for run_id in run_ids:
                await client.action.requeue(run_id)
            return len(run_ids), len(run_ids)
        counts = await client.action.counts(action)
        failed = counts.failed + counts.timed_out
        if failed == 0:
            return 0, 0
        ops.confirm(yes, f"Re-queue all {failed} failed runs of {action!r}?")
        done = await client.action.requeue_failed(action)
        return done.count, done.calls

    _bulk(url, namespace, as_json, action, run, ("re-queued", "failed"))


@runs.command("purge")
@ops.connection_options
@ops.json_option
@ops.yes_option
@click.argument("action")
@click.option("--state", type=click.Choice(["pending", "delayed", "completed", "failed"]),
              required=True)  # fmt: skip
def purge(url: str, namespace: str, as_json: bool, yes: bool, action: str, state: str) -> None:
    """Delete every run of ACTION in one state, with its input."""

    async def run(client: FloClient) -> tuple[int, int]:
        """(runs deleted, script calls)"""
        counts = await client.action.counts(action)
        n = {
            "pending": counts.pending,
            "delayed": counts.delayed,
            "completed": counts.completed,
            "failed": counts.failed + counts.timed_out,
        }[state]
        if n == 0:
            return 0, 0
        ops.confirm(yes, f"Delete all {n} {state} runs of {action!r}? This cannot be undone.")
        done = await client.action.purge(action, state)
        return done.count, done.calls

    _bulk(url, namespace, as_json, action, run, ("purged", state), state=state)
