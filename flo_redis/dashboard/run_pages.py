"""The dashboard's pages of runs: one run with its input (``/run``), and a search of an
action's runs (``/find``, the GET form on the action page: no JavaScript).

What a page shows of a run's input, output, progress and error goes through the app's
redactor first (:mod:`flo_redis.ops.redaction`); a search is one bounded call
(:meth:`~flo_redis.actions.inspect.ActionInspection.find`) whose cursor the page links
to for more. A run's page also shows the graph around it (:mod:`flo_redis.ops.run_graph`):
the first page of its parents and of the runs that depend on it, each linking to its page.
A batch's page (``/batch``) shows its counts and the first page of its members
(:mod:`flo_redis.ops.batch_view`), each linking to its page; a run's page links to its batch.
"""

from __future__ import annotations

from aiohttp import web

from flo_redis._wire.keys import action_of_run
from flo_redis.dashboard import data
from flo_redis.dashboard.pages import _required
from flo_redis.dashboard.render import REDACTOR, client_of, render_page
from flo_redis.ops.batch_view import batch_view
from flo_redis.ops.payloads import shown, span
from flo_redis.ops.run_graph import run_graph

FOUND_SHOWN = 50  # runs a search page lists


async def run(request: web.Request) -> web.StreamResponse:
    client = client_of(request)
    details = await client.action.details(_required(request, "id"))
    hide = request.app[REDACTOR]
    status = hide.run(details.status)
    raw_input = hide.value("input", details.input, status.run_id)
    context = {
        "run": status,
        "action_name": action_of_run(status.run_id),
        "idempotency_key": details.idempotency_key,
        "input": None if raw_input is None else shown(raw_input),
        "input_missing": details.input_missing or "",
        "output": None if status.output is None else shown(status.output),
        "waited": _between(status.created_at_ms, status.started_at_ms),
        "ran": _between(status.started_at_ms, status.completed_at_ms),
        "requeueable": status.status in data.REQUEUEABLE,
        "cancellable": status.status in data.CANCELLABLE,
        "graph": await run_graph(client, details.status),
    }
    return await render_page(request, "run.html", context)


async def batch(request: web.Request) -> web.StreamResponse:
    view = await batch_view(client_of(request), _required(request, "id"))
    return await render_page(request, "batch.html", {"view": view})


def _between(start_ms: int | None, end_ms: int | None) -> str:
    """How long from ``start_ms`` to ``end_ms`` ("1.2 s"), or "" when one is unknown."""
    if start_ms is None or end_ms is None:
        return ""
    return span(max(end_ms - start_ms, 0))


async def find(request: web.Request) -> web.StreamResponse:
    name = _required(request, "name")
    query = request.query.get("q", "").strip()
    client = client_of(request)
    found = None
    if query:
        cursor = request.query.get("cursor")
        found = await client.action.find(
            name, query, limit=FOUND_SHOWN, cursor=cursor.encode() if cursor else None
        )
    else:
        await client.action.counts(name)  # NotFoundError for an action that is not there
    hide = request.app[REDACTOR]
    runs = [(f.by, hide.run(f.run)) for f in found.runs] if found else []
    context = {"name": name, "query": query, "found": found, "runs": runs}
    return await render_page(request, "find.html", context)
