"""The dashboard's web application: pages rendered on the server, forms for changes.

Pages are plain HTML from Jinja2 templates with autoescaping on for every value, styled
by one stylesheet shipped in the package; there is no JavaScript at all, so the
Content-Security-Policy forbids scripts outright. Changes are POSTed forms that the
:class:`~flo_redis.dashboard.guard.Guard` checks (write access, session, CSRF, origin)
before anything is sent to Redis.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Awaitable, Callable, Mapping
from html import escape
from importlib import resources
from typing import Any

import jinja2
from aiohttp import web
from yarl import URL

from flo_redis._wire.keys import action_of_run
from flo_redis.client import FloClient
from flo_redis.dashboard import data
from flo_redis.dashboard.guard import Guard, Refused, Throttled, local_path
from flo_redis.dashboard.sparkline import sparkline
from flo_redis.errors import ConflictError, FloError, NotFoundError, ValidationError
from flo_redis.ops.discovery import health
from flo_redis.quarantine import (
    ActionQuarantine,
    GroupQuarantine,
    Quarantine,
    QueueQuarantine,
    WorkerQuarantine,
)
from flo_redis.types import StreamID

log = logging.getLogger("flo_redis.dashboard")

CLIENT: web.AppKey[FloClient] = web.AppKey("client", FloClient)
GUARD: web.AppKey[Guard] = web.AppKey("guard", Guard)
TEMPLATES: web.AppKey[jinja2.Environment] = web.AppKey("templates", jinja2.Environment)

# What a finished change says on the page it returns to (never text from the request).
DONE = {
    "requeued": "Run re-queued: it waits for a worker again.",
    "cancelled": "Run cancelled: it ends CANCELLED, and a worker running it is told to stop.",
    "requeued_all": "{n} failed runs re-queued.",
    "purged": "{n} runs purged.",
    "drained": "Worker told to drain: it takes no new work and stops when its runs finish.",
    "replayed": "Dead letters appended to the stream again.",
    "put_back": "Record put back where it was set aside from.",
    "deleted": "Record deleted from the quarantine for good.",
    "login": "Logged in: changes are allowed from this browser.",
    "logout": "Logged out.",
}
HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'self'; img-src 'self' data:; "
        "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}
_STATUS_OF = ((NotFoundError, 404), (ValidationError, 400), (ConflictError, 409))
TEXT_PREVIEW = 4096  # bytes of a payload or result shown on a page

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def create_app(client: FloClient, guard: Guard) -> web.Application:
    """The dashboard for ``client``'s namespace. The client must be connected while the
    app serves; the caller owns it."""
    app = web.Application(middlewares=[_guarded_pages])
    app.on_response_prepare.append(_secured)
    app[CLIENT] = client
    app[GUARD] = guard
    app[TEMPLATES] = _templates()
    app.router.add_get("/", overview)
    app.router.add_get("/action", action)
    app.router.add_get("/run", run)
    app.router.add_get("/workers", workers)
    app.router.add_get("/streams", streams)
    app.router.add_get("/group", group)
    app.router.add_get("/quarantine", quarantine)
    app.router.add_get("/login", login_form)
    app.router.add_post("/login", login)
    app.router.add_post("/logout", logout)
    app.router.add_post("/run/requeue", requeue_run)
    app.router.add_post("/run/cancel", cancel_run)
    app.router.add_post("/action/requeue-failed", requeue_failed)
    app.router.add_post("/action/purge", purge)
    app.router.add_post("/worker/drain", drain_worker)
    app.router.add_post("/group/replay", replay)
    app.router.add_post("/quarantine/replay", quarantine_replay)
    app.router.add_post("/quarantine/delete", quarantine_delete)
    app.router.add_get("/static/style.css", stylesheet)
    return app


def _templates() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("flo_redis.dashboard", "templates"),
        autoescape=True,  # every value is escaped, in every template, whatever its name
        undefined=jinja2.StrictUndefined,
    )
    env.filters["when"] = _when
    env.filters["ago"] = _ago
    env.filters["preview"] = _preview
    env.filters["health"] = health
    env.filters["hexdump"] = lambda raw: raw[:48].hex(" ") + (" …" if len(raw) > 48 else "")
    env.filters["sid"] = lambda sid: sid.to_redis() if isinstance(sid, StreamID) else str(sid)
    env.globals["sparkline"] = sparkline
    return env


# --- middleware ------------------------------------------------------------------------


async def _secured(_request: web.Request, response: web.StreamResponse) -> None:
    """The security headers, on every answer the app gives: pages, redirects, every
    error (aiohttp's own too) and the stylesheet."""
    response.headers.update(HEADERS)


@web.middleware
async def _guarded_pages(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Library errors, refusals and anything unexpected as pages (the headers come from
    :func:`_secured`); never a bare 500."""
    try:
        request.app[GUARD].check_host(request)
        return await handler(request)
    except Throttled as exc:
        response = await _error_page(request, "refused.html", {"why": exc.why, "login": False}, 429)
        response.headers["Retry-After"] = str(exc.retry_after_s)
        return response
    except Refused as exc:
        context = {"why": exc.why, "login": exc.login}
        return await _error_page(request, "refused.html", context, 403)
    except FloError as exc:
        status = next((code for kind, code in _STATUS_OF if isinstance(exc, kind)), 502)
        return await _error_page(request, "error.html", {"error": str(exc)}, status)
    except web.HTTPException as exc:
        if exc.status < 400:  # a redirect after a change
            raise
        response = await _error_page(request, "error.html", {"error": exc.reason}, exc.status)
        if "Allow" in exc.headers:  # 405: the methods the path takes
            response.headers["Allow"] = exc.headers["Allow"]
        return response
    except Exception:
        log.exception("dashboard page %s %s failed", request.method, request.rel_url.path)
        context = {"error": "the dashboard failed to answer; its log says why"}
        return await _error_page(request, "error.html", context, 500)


async def _error_page(
    request: web.Request, template: str, context: Mapping[str, Any], status: int
) -> web.Response:
    """An error page; when even that cannot be drawn (Redis is gone while the session
    is read), a plain one that needs nothing."""
    try:
        return await _page(request, template, context, status)
    except Exception:
        log.exception("dashboard error page %s failed", status)
        text = context.get("error") or context.get("why") or ""
        html = f"<!doctype html><title>{status}</title><p>{escape(str(text))}</p>"
        return web.Response(text=html, content_type="text/html", status=status)


async def _page(
    request: web.Request, template: str, context: Mapping[str, Any], status: int = 200
) -> web.Response:
    app = request.app
    client = app[CLIENT]
    try:
        now_ms = await client.server_time_ms()
    except FloError:
        now_ms = int(datetime.datetime.now(datetime.timezone.utc).timestamp() * 1000)
    refresh = request.query.get("refresh", "")
    kept = {k: v for k, v in request.query.items() if k not in ("done", "refresh")}
    # The page's own path, never read as another site (//evil.example/x is a path).
    here = URL(local_path(request.rel_url.path)).with_query(kept)
    html = (
        app[TEMPLATES]
        .get_template(template)
        .render(
            access=await app[GUARD].access(request, client),
            namespace=client.namespace,
            now_ms=now_ms,
            done=_done(request),
            refresh=int(refresh) if refresh in ("2", "5", "10", "30") else 0,
            here=str(here),
            refreshing=str(here.update_query(refresh=5)),
            **context,
        )
    )
    return web.Response(text=html, content_type="text/html", status=status)


def _done(request: web.Request) -> str:
    """The note of a finished change; its only input besides the kind is a count."""
    note = DONE.get(request.query.get("done", ""), "")
    count = request.query.get("n", "")
    # ASCII digits only ("²" is a digit to str.isdigit), and few enough to be a count.
    counted = count.isascii() and count.isdigit() and len(count) <= 12
    return note.format(n=int(count) if counted else "The")


def _required(request: web.Request, name: str) -> str:
    value = request.query.get(name, "")
    if not value:
        raise ValidationError(f"the page needs ?{name}=...")
    return value


# --- pages -----------------------------------------------------------------------------


async def overview(request: web.Request) -> web.StreamResponse:
    page = await data.overview(request.app[CLIENT])
    return await _page(request, "overview.html", {"page": page})


async def action(request: web.Request) -> web.StreamResponse:
    name = _required(request, "name")
    cursor = request.query.get("cursor")
    page = await data.action_page(
        request.app[CLIENT],
        name,
        request.query.get("state") or None,
        cursor.encode() if cursor else None,
    )
    if page.info is None:
        raise NotFoundError(f"action {name!r} is not registered in this namespace")
    return await _page(request, "action.html", {"page": page})


async def run(request: web.Request) -> web.StreamResponse:
    status = await request.app[CLIENT].action.status(_required(request, "id"))
    context = {
        "run": status,
        "action_name": action_of_run(status.run_id),
        "requeueable": status.status in data.REQUEUEABLE,
        "cancellable": status.status in data.CANCELLABLE,
    }
    return await _page(request, "run.html", context)


async def workers(request: web.Request) -> web.StreamResponse:
    page = await data.workers(request.app[CLIENT])
    set_aside = await request.app[CLIENT].quarantine.count(WorkerQuarantine())
    return await _page(
        request,
        "workers.html",
        {"workers": page.workers, "summary": page.summary, "set_aside": set_aside},
    )


async def streams(request: web.Request) -> web.StreamResponse:
    found = await data.streams(request.app[CLIENT])
    return await _page(request, "streams.html", {"streams": found})


async def group(request: web.Request) -> web.StreamResponse:
    page = await data.group_page(
        request.app[CLIENT], _required(request, "stream"), _required(request, "group")
    )
    return await _page(request, "group.html", {"page": page})


def _scope(fields: Mapping[str, str]) -> Quarantine:
    """The quarantine a page or form names: ``action``, ``queue``, ``stream`` with
    ``group`` (and ``partition``), or ``workers``."""
    if fields.get("action"):
        return ActionQuarantine(fields["action"])
    if fields.get("queue"):
        return QueueQuarantine(fields["queue"])
    if fields.get("stream") and fields.get("group"):
        partition = fields.get("partition", "0")
        if not partition.isdigit():
            raise ValidationError(f"partition must be a number, got {partition!r}")
        return GroupQuarantine(fields["stream"], fields["group"], int(partition))
    if fields.get("workers"):
        return WorkerQuarantine()
    raise ValidationError("the page needs ?action=, ?queue=, ?stream=&group= or ?workers=1")


async def quarantine(request: web.Request) -> web.StreamResponse:
    scope = _scope(request.query)
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
    return await _page(request, "quarantine.html", context)


async def login_form(request: web.Request) -> web.StreamResponse:
    return await _page(request, "login.html", {"next": local_path(request.query.get("next", ""))})


async def stylesheet(request: web.Request) -> web.StreamResponse:
    css = resources.files("flo_redis.dashboard").joinpath("static/style.css").read_text()
    return web.Response(text=css, content_type="text/css")


# --- changes ---------------------------------------------------------------------------


async def _form(request: web.Request) -> Mapping[str, str]:
    """The POSTed form, once the guard allowed the change."""
    form = await request.post()
    fields = {k: v for k, v in form.items() if isinstance(v, str)}
    await request.app[GUARD].check_change(request, request.app[CLIENT], fields.get("csrf", ""))
    return fields


def _back(
    fields: Mapping[str, str], done: str, default: str = "/", count: int | None = None
) -> web.HTTPSeeOther:
    target = local_path(fields.get("next", ""), default)
    joiner = "&" if "?" in target else "?"
    counted = "" if count is None else f"&n={count}"
    return web.HTTPSeeOther(f"{target}{joiner}done={done}{counted}")


async def login(request: web.Request) -> web.StreamResponse:
    form = await request.post()
    token = form.get("token")
    target = local_path(str(form.get("next", "")))
    response = web.HTTPSeeOther(f"{target}{'&' if '?' in target else '?'}done=login")
    token_text = token if isinstance(token, str) else ""
    await request.app[GUARD].log_in(request, request.app[CLIENT], token_text, response)
    raise response


async def logout(request: web.Request) -> web.StreamResponse:
    await _form(request)
    response = web.HTTPSeeOther("/?done=logout")
    await request.app[GUARD].log_out(request, request.app[CLIENT], response)
    raise response


async def requeue_run(request: web.Request) -> web.StreamResponse:
    fields = await _form(request)
    run_id = fields.get("id", "")
    await request.app[CLIENT].action.requeue(run_id)
    raise _back(fields, "requeued")


async def cancel_run(request: web.Request) -> web.StreamResponse:
    fields = await _form(request)
    await request.app[CLIENT].action.cancel(fields.get("id", ""))
    raise _back(fields, "cancelled")


async def requeue_failed(request: web.Request) -> web.StreamResponse:
    fields = await _form(request)
    result = await request.app[CLIENT].action.requeue_failed(fields.get("name", ""))
    raise _back(fields, "requeued_all", count=result.count)


async def purge(request: web.Request) -> web.StreamResponse:
    fields = await _form(request)
    if fields.get("confirm") != "yes":
        raise ValidationError("tick the box to confirm: a purge deletes the runs for good")
    result = await request.app[CLIENT].action.purge(fields.get("name", ""), fields.get("state", ""))
    raise _back(fields, "purged", count=result.count)


async def drain_worker(request: web.Request) -> web.StreamResponse:
    fields = await _form(request)
    await request.app[CLIENT].worker.drain(fields.get("id", ""))
    raise _back(fields, "drained", "/workers")


async def replay(request: web.Request) -> web.StreamResponse:
    fields = await _form(request)
    stream, group_name = fields.get("stream", ""), fields.get("group", "")
    letter = fields.get("id", "")
    if letter:
        partition, _, sid = letter.partition("/")
        try:
            ids, part = [StreamID.from_redis(sid)], int(partition)
        except ValueError:
            raise ValidationError(f"dead letter {letter!r} is not '<partition>/<id>'") from None
        await request.app[CLIENT].stream.replay_dead_letters(
            stream, group_name, ids=ids, partition=part
        )
    else:
        await request.app[CLIENT].stream.replay_dead_letters(stream, group_name)
    raise _back(fields, "replayed")


async def quarantine_replay(request: web.Request) -> web.StreamResponse:
    fields = await _form(request)
    await request.app[CLIENT].quarantine.replay(_scope(fields), fields.get("id", ""))
    raise _back(fields, "put_back")


async def quarantine_delete(request: web.Request) -> web.StreamResponse:
    fields = await _form(request)
    await request.app[CLIENT].quarantine.delete(_scope(fields), [fields.get("id", "")])
    raise _back(fields, "deleted")


# --- filters ---------------------------------------------------------------------------


def _when(ms: int | None) -> str:
    if not ms:
        return "—"
    try:
        at = datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc)
    except (OverflowError, OSError, ValueError):  # past the year 9999 (or before 1)
        return f"{ms} ms since 1970"
    return at.strftime("%Y-%m-%d %H:%M:%S UTC")


def _ago(ms: int | None, now_ms: int) -> str:
    """How long ago ``ms`` was ("12 s ago"), or how soon it comes ("in 3 min")."""
    if not ms:
        return "—"
    seconds = abs(now_ms - ms) // 1000
    if seconds < 90:
        span = f"{seconds} s"
    elif seconds < 5400:
        span = f"{seconds // 60} min"
    elif seconds < 172800:
        span = f"{seconds // 3600} h"
    else:
        span = f"{seconds // 86400} d"
    return f"in {span}" if ms > now_ms else f"{span} ago"


def _preview(raw: bytes | None) -> str:
    if raw is None:
        return "—"
    text = raw[:TEXT_PREVIEW].decode("utf-8", errors="replace")
    more = len(raw) - TEXT_PREVIEW
    return text + (f"… ({more} more bytes)" if more > 0 else "")
