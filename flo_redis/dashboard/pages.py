"""The dashboard's pages: what each GET path shows, read through the client."""

from __future__ import annotations

from collections.abc import Mapping
from importlib import resources
from typing import Any

from aiohttp import web

from flo_redis.dashboard import data, live
from flo_redis.dashboard.guard import local_path
from flo_redis.dashboard.history import window_arg
from flo_redis.dashboard.render import client_of, page_fixtures, page_html, render_page
from flo_redis.errors import NotFoundError, ValidationError
from flo_redis.quarantine import WorkerQuarantine


def _required(request: web.Request, name: str) -> str:
    """The query's ``name``; a ValidationError (a 400 page) when it is missing."""
    value = request.query.get(name, "")
    if not value:
        raise ValidationError(f"the page needs ?{name}=...")
    return value


View = tuple[str, Mapping[str, Any]]  # a page's template and what it shows


async def overview_view(request: web.Request) -> View:
    page = await data.overview(client_of(request), window_arg(request.query.get("window")))
    return "overview.html", {"page": page}


async def action_view(request: web.Request) -> View:
    name = _required(request, "name")
    cursor = request.query.get("cursor")
    page = await data.action_page(
        client_of(request),
        name,
        request.query.get("state") or None,
        cursor.encode() if cursor else None,
        window_arg(request.query.get("window")),
    )
    if page.info is None:
        raise NotFoundError(f"action {name!r} is not registered in this namespace")
    return "action.html", {"page": page}


async def workers_view(request: web.Request) -> View:
    client = client_of(request)
    page = await data.workers(client)
    set_aside = await client.quarantine.count(WorkerQuarantine())
    context = {"workers": page.workers, "summary": page.summary, "set_aside": set_aside}
    return "workers.html", context


# The pages that refresh live (/live/<path>), each drawn by its view.
LIVE_VIEWS = {"/": overview_view, "/action": action_view, "/workers": workers_view}


async def overview(request: web.Request) -> web.StreamResponse:
    return await render_page(request, *await overview_view(request))


async def action(request: web.Request) -> web.StreamResponse:
    return await render_page(request, *await action_view(request))


async def workers(request: web.Request) -> web.StreamResponse:
    return await render_page(request, *await workers_view(request))


async def live_page(request: web.Request) -> web.StreamResponse:
    """The live event stream of the page at /live/<path> (:mod:`.live`)."""
    path = "/" + request.match_info["page"]
    view = LIVE_VIEWS.get(path)
    if view is None:
        raise NotFoundError(f"{path} is not a page that refreshes live")
    return await live.stream(request, view, page_html, page_fixtures, path)


async def streams(request: web.Request) -> web.StreamResponse:
    found = await data.streams(client_of(request))
    return await render_page(request, "streams.html", {"streams": found})


async def group(request: web.Request) -> web.StreamResponse:
    page = await data.group_page(
        client_of(request), _required(request, "stream"), _required(request, "group")
    )
    return await render_page(request, "group.html", {"page": page})


async def quarantine(request: web.Request) -> web.StreamResponse:
    scope = data.quarantine_of(request.query)
    client = client_of(request)
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
    return _static("style.css", "text/css")


async def live_script(request: web.Request) -> web.StreamResponse:
    return _static("live.js", "text/javascript")


def _static(name: str, content_type: str) -> web.Response:
    text = resources.files("flo_redis.dashboard").joinpath(f"static/{name}").read_text()
    return web.Response(text=text, content_type=content_type)
