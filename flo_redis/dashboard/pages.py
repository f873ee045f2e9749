"""The dashboard's pages: what each GET path shows, read through the client."""

from __future__ import annotations

from importlib import resources

from aiohttp import web

from flo_redis._wire.keys import action_of_run
from flo_redis.dashboard import data
from flo_redis.dashboard.guard import local_path
from flo_redis.dashboard.history import window_arg
from flo_redis.dashboard.render import CLIENT, render_page
from flo_redis.errors import NotFoundError, ValidationError
from flo_redis.quarantine import WorkerQuarantine


def _required(request: web.Request, name: str) -> str:
    """The query's ``name``; a ValidationError (a 400 page) when it is missing."""
    value = request.query.get(name, "")
    if not value:
        raise ValidationError(f"the page needs ?{name}=...")
    return value


async def overview(request: web.Request) -> web.StreamResponse:
    page = await data.overview(request.app[CLIENT], window_arg(request.query.get("window")))
    return await render_page(request, "overview.html", {"page": page})


async def action(request: web.Request) -> web.StreamResponse:
    name = _required(request, "name")
    cursor = request.query.get("cursor")
    page = await data.action_page(
        request.app[CLIENT],
        name,
        request.query.get("state") or None,
        cursor.encode() if cursor else None,
        window_arg(request.query.get("window")),
    )
    if page.info is None:
        raise NotFoundError(f"action {name!r} is not registered in this namespace")
    return await render_page(request, "action.html", {"page": page})


async def run(request: web.Request) -> web.StreamResponse:
    status = await request.app[CLIENT].action.status(_required(request, "id"))
    context = {
        "run": status,
        "action_name": action_of_run(status.run_id),
        "requeueable": status.status in data.REQUEUEABLE,
        "cancellable": status.status in data.CANCELLABLE,
    }
    return await render_page(request, "run.html", context)


async def workers(request: web.Request) -> web.StreamResponse:
    page = await data.workers(request.app[CLIENT])
    set_aside = await request.app[CLIENT].quarantine.count(WorkerQuarantine())
    return await render_page(
        request,
        "workers.html",
        {"workers": page.workers, "summary": page.summary, "set_aside": set_aside},
    )


async def streams(request: web.Request) -> web.StreamResponse:
    found = await data.streams(request.app[CLIENT])
    return await render_page(request, "streams.html", {"streams": found})


async def group(request: web.Request) -> web.StreamResponse:
    page = await data.group_page(
        request.app[CLIENT], _required(request, "stream"), _required(request, "group")
    )
    return await render_page(request, "group.html", {"page": page})


async def quarantine(request: web.Request) -> web.StreamResponse:
    scope = data.quarantine_of(request.query)
    client = request.app[CLIENT]
    page = await client.quarantine.list(
        scope, limit=data.QUARANTINE_ROWS, after=request.query.get("after") or None
    )
    context = {
        "page": page,
        "total": await client.quarantine.count(scope),
        "where": scope.label(client.session),
        "scope": data.scope_fields(scope),
    }
    return await render_page(request, "quarantine.html", context)


async def login_form(request: web.Request) -> web.StreamResponse:
    back_to = local_path(request.query.get("next", ""))
    return await render_page(request, "login.html", {"next": back_to})


async def stylesheet(request: web.Request) -> web.StreamResponse:
    css = resources.files("flo_redis.dashboard").joinpath("static/style.css").read_text()
    return web.Response(text=css, content_type="text/css")
