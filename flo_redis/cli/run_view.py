"""``flo-redis runs show|find``: one run as an operator reads it, and finding runs.

``show`` prints a run's facts with readable times, the graph around it (its parents and
the runs that depend on it: :mod:`flo_redis.ops.run_graph`), then its input, output,
progress, error and traceback (:mod:`flo_redis.ops.payloads`: pretty JSON, text or
hex, cut at 64 KiB); ``--json`` keeps times in ms and gives the input whole
(``encoding`` and ``data``) and the graph (``graph``). ``find`` looks a text up in one
action's runs (:meth:`find`). Both hide what ``--redact`` / ``--redact-keys`` name
(:mod:`flo_redis.ops.redaction`).
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Callable
from typing import Any, TypeVar

import click

from flo_redis.actions.finding import DEFAULT_SCAN, MAX_FOUND, MAX_SCAN, FoundRuns, RunDetails
from flo_redis.cli import _ops as ops
from flo_redis.cli import _tables as tables
from flo_redis.cli._names import Names
from flo_redis.cli._options import env_option
from flo_redis.cli._render import say
from flo_redis.client import FloClient
from flo_redis.errors import ValidationError
from flo_redis.ops.payloads import encoded, shown, span
from flo_redis.ops.redaction import Redactor, redactor
from flo_redis.ops.run_graph import RunGraph, run_graph
from flo_redis.types import ActionRunStatus

F = TypeVar("F", bound=Callable[..., Any])


def redact_options(command: F) -> F:
    """``--redact module:function`` and ``--redact-keys a,b`` (env FLO_REDIS_REDACT,
    FLO_REDIS_REDACT_KEYS): what a command hides of the runs it shows."""
    keys = env_option(
        "--redact-keys",
        "Hide the members of JSON values whose key holds one of these (comma-separated, "
        "case ignored)",
        metavar="KEYS",
        default=None,
        show_default=False,
    )
    hook = env_option(
        "--redact",
        "A function module:function(field, value, run_id) answering what to show of each value",
        metavar="MODULE:FUNCTION",
        default=None,
        show_default=False,
    )
    return hook(keys(command))


def redactor_of(hook: str | None, keys: str | None) -> Redactor:
    """The redactor the options name; a bad hook is a usage error (exit 2)."""
    try:
        return redactor(hook, keys)
    except ValidationError as exc:
        raise click.BadParameter(str(exc), param_hint="--redact") from None


def short(text: str | None, width: int = 60) -> str:
    """The first line of ``text``, cut at ``width`` characters."""
    line = (text or "").splitlines()[0] if text else ""
    return line if len(line) <= width else line[: width - 1] + "…"


def when(ms: int | None, now_ms: int) -> str:
    """ "2026-12-06 13:42:55 UTC (4m ago)", or "(in 3m)" for a time to come."""
    if ms is None:
        return ""
    try:
        at = datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc)
        stamp = at.strftime("%Y-%m-%d %H:%M:%S UTC")
    except (OverflowError, OSError, ValueError):
        stamp = f"{ms} ms since 1970"
    if ms > now_ms:
        return f"{stamp} (in {ops.age(now_ms, ms)})"
    return f"{stamp} ({ops.age(ms, now_ms)} ago)"


def facts(run: ActionRunStatus, now_ms: int, key: str | None) -> list[tuple[str, object]]:
    """The rows of a run's facts table (empty ones left out by the caller)."""
    started = finished = ""
    if run.started_at_ms is not None:
        waited = span(max(run.started_at_ms - run.created_at_ms, 0))
        started = f"{when(run.started_at_ms, now_ms)}, {waited} after created"
    if run.completed_at_ms is not None:
        took = span(max(run.completed_at_ms - (run.started_at_ms or run.created_at_ms), 0))
        finished = f"{when(run.completed_at_ms, now_ms)}, {took} after started"
    return [
        ("run", run.run_id),
        ("status", run.status.name),
        ("attempt", f"{run.attempt} of {run.max_retries}"),
        ("priority", run.priority or ""),
        ("idempotency key", key or ""),
        ("created", when(run.created_at_ms, now_ms)),
        ("due", when(run.due_at_ms, now_ms)),
        ("started", started),
        ("finished", finished),
        ("worker", run.worker_id),
        ("outcome", run.outcome),
        ("progress at", when(run.progress_at_ms, now_ms)),
        ("batch", run.batch or ""),
    ]


def print_value(label: str, raw: bytes | None) -> None:
    """A section: "<label> (<kind>, N bytes):" then the value as people read it."""
    if raw is None:
        return
    view = shown(raw)
    say()
    say(f"{label} ({view.kind}, {view.size} bytes):")
    say(view.text)
    if view.note:
        say(view.note)


def print_graph(graph: RunGraph) -> None:
    """The runs it waits for (each with its policy and state) and those waiting for it,
    each under its count line ("parents: 3 (1 waiting)", "dependents: 2"); nothing for a
    run with neither."""
    draw = tables.console()
    if graph.parents or graph.parent_rows:
        say()
        say(f"parents: {graph.parents_note()}")
        rows = [(p.run_id, p.on_failure, p.state) for p in graph.parent_rows]
        draw.print(tables.table("", ["run", "on failure", "state"], rows))
    if graph.dependents:
        say()
        say(f"dependents: {graph.dependents_note()}")
        draw.print(tables.table("", ["run"], [(d,) for d in graph.dependents]))


def print_details(details: RunDetails, now_ms: int, graph: RunGraph | None = None) -> None:
    run = details.status
    rows = [r for r in facts(run, now_ms, details.idempotency_key) if r[1]]
    tables.console().print(tables.table(f"run {run.run_id}", ["field", "value"], rows))
    if graph is not None:
        print_graph(graph)
    if details.input is None:
        say()
        say(f"input: {details.input_missing}")
    print_value("input", details.input)
    print_value("progress", run.progress)
    print_value("output", run.output)
    for label, text in (("error", run.error_message), ("traceback", run.error_traceback)):
        if text:
            say()
            say(f"{label}:")
            say(text)


def details_json(details: RunDetails, graph: RunGraph | None = None) -> dict[str, Any]:
    """The run as ``ops.plain`` gives it (times in ms), with the input whole, its
    idempotency key and the graph around it (:meth:`RunGraph.as_json`)."""
    data: dict[str, Any] = ops.plain(details.status)
    data["input"] = encoded(details.input)
    data["idempotency_key"] = details.idempotency_key
    data["input_missing"] = details.input_missing
    if graph is not None:
        data["graph"] = graph.as_json()
    return data


def redacted(details: RunDetails, hide: Redactor) -> RunDetails:
    rid = details.status.run_id
    return dataclasses.replace(
        details, status=hide.run(details.status), input=hide.value("input", details.input, rid)
    )


@click.command("show")
@ops.connection_options
@ops.json_option
@tables.wide_option
@redact_options
@click.argument("run_id")
def show(
    url: str,
    namespace: str,
    as_json: bool,
    redact: str | None,
    redact_keys: str | None,
    run_id: str,
) -> None:
    """Everything known about RUN_ID: status, attempts, times, the runs it waits for
    and those waiting for it, input, output, error and traceback."""
    hide = redactor_of(redact, redact_keys)

    async def read(client: FloClient) -> tuple[int, RunDetails, RunGraph]:
        details = await client.action.details(run_id)
        graph = await run_graph(client, details.status)
        return await client.server_time_ms(), details, graph

    now_ms, details, graph = ops.with_client(url, namespace, read)
    details = redacted(details, hide)
    if as_json:
        ops.print_json(details_json(details, graph))
        return
    print_details(details, now_ms, graph)


def _cursor(cursor: str | None) -> bytes | None:
    return cursor.encode() if cursor else None


@click.command("find")
@ops.connection_options
@ops.json_option
@tables.wide_option
@redact_options
@click.argument("action")
@click.argument("query")
@click.option("--limit", type=click.IntRange(1, MAX_FOUND), default=20, show_default=True,
              help="Find at most this many runs.")  # fmt: skip
@click.option("--scan", type=click.IntRange(1, MAX_SCAN), default=DEFAULT_SCAN,
              show_default=True, help="Examine at most this many runs.")  # fmt: skip
@click.option("--cursor", default=None, help="Go on from where a previous search stopped.")
def find(
    url: str,
    namespace: str,
    as_json: bool,
    redact: str | None,
    redact_keys: str | None,
    action: str,
    query: str,
    limit: int,
    scan: int,
    cursor: str | None,
) -> None:
    """Runs of ACTION that QUERY names: its run id, its idempotency key, or a piece of
    its error message (case ignored), failed runs first, newest first."""
    hide = redactor_of(redact, redact_keys)

    async def read(client: FloClient) -> tuple[int, FoundRuns]:
        found = await client.action.find(
            action, query, limit=limit, cursor=_cursor(cursor), scan=scan
        )
        return await client.server_time_ms(), found

    now_ms, found = ops.with_client(url, namespace, read, Names(action=action))
    runs = [(f.by, hide.run(f.run)) for f in found.runs]
    if as_json:
        ops.print_json(
            {
                "action": action,
                "query": query,
                "runs": [{"found_by": by, **ops.plain(run)} for by, run in runs],
                "examined": found.examined,
                "cursor": found.cursor.decode() if found.cursor else None,
            }
        )
        return
    if runs:
        tables.console().print(
            tables.table(
                f"runs of {action!r} matching {query!r}",
                ["run", "found by", "status", "finished", "error"],
                [
                    (
                        run.run_id,
                        by,
                        run.status.name,
                        when(run.completed_at_ms, now_ms),
                        short(run.error_message),
                    )
                    for by, run in runs
                ],
                wrap=["error"],
                drop=["finished"],
            )
        )
    else:
        say(f"no run of {action} matches {query!r} ({found.examined} runs examined)")
    if found.cursor is not None:
        say(f"searched {found.examined} runs; more: --cursor '{found.cursor.decode()}'")
