"""Drawing the dashboard's pages: the app's keys, the Jinja2 templates with their
filters, and one page (or error page) rendered for a request.

Every template is rendered with autoescaping on, whatever its name, so every value on a
page is HTML-escaped; the only text that is not a value is a finished change's note,
chosen by name from :data:`DONE`.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Mapping
from html import escape
from typing import Any

import jinja2
from aiohttp import web
from yarl import URL

from flo_redis.actions.history import format_ms
from flo_redis.client import FloClient
from flo_redis.dashboard.guard import Guard, local_path
from flo_redis.dashboard.spaces import NS_PARAM, Namespaces
from flo_redis.dashboard.sparkline import sparkline
from flo_redis.errors import FloError
from flo_redis.ops.discovery import health
from flo_redis.ops.redaction import NOTHING, Redactor
from flo_redis.types import StreamID

log = logging.getLogger("flo_redis.dashboard")

CLIENT: web.AppKey[FloClient] = web.AppKey("client", FloClient)
SPACES: web.AppKey[Namespaces] = web.AppKey("namespaces", Namespaces)
# The client of the namespace a request shows (set by the app's middleware).
SHOWN: web.RequestKey[FloClient] = web.RequestKey("shown", FloClient)
GUARD: web.AppKey[Guard] = web.AppKey("guard", Guard)
TEMPLATES: web.AppKey[jinja2.Environment] = web.AppKey("templates", jinja2.Environment)
REDACTOR: web.AppKey[Redactor] = web.AppKey("redactor", Redactor)

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
    "schedule_paused": "Schedule paused: it creates no run until resumed.",
    "schedule_resumed": "Schedule resumed at the occurrence it held.",
    "schedule_triggered": "Schedule triggered: one run created now; its next occurrence stays.",
    "schedule_removed": "Schedule removed; the runs it created stay.",
    "login": "Logged in: changes are allowed from this browser.",
    "logout": "Logged out.",
}
TEXT_PREVIEW = 4096  # bytes of a payload or result shown on a page


def templates() -> jinja2.Environment:
    """The dashboard's templates, with the filters the pages use."""
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
    env.filters["ms"] = format_ms
    env.globals["sparkline"] = sparkline
    env.globals["link"] = _link
    env.filters["urlencode"] = _urlencode
    env.filters["redacted"] = NOTHING.run  # the app's redactor replaces it (create_app)
    return env


def client_of(request: web.Request) -> FloClient:
    """The client of the namespace ``request`` shows (``?ns=``; the dashboard's own
    without)."""
    return request.get(SHOWN) or request.app[CLIENT]


@jinja2.pass_context
def _urlencode(context: jinja2.runtime.Context, value: Any) -> str:
    """Jinja's urlencode, but a query built from a mapping carries the namespace the
    page shows: every link a page builds stays in its namespace."""
    ns = context.get("ns_param")
    if ns and isinstance(value, Mapping) and NS_PARAM not in value:
        value = {**value, NS_PARAM: ns}
    return jinja2.filters.do_urlencode(value)


@jinja2.pass_context
def _link(context: jinja2.runtime.Context, path: str) -> str:
    """``path`` (no query) in the namespace the page shows."""
    ns = context.get("ns_param")
    return f"{path}?{jinja2.filters.do_urlencode({NS_PARAM: ns})}" if ns else path


async def render_page(
    request: web.Request, template: str, context: Mapping[str, Any], status: int = 200
) -> web.Response:
    """``template`` rendered for ``request`` with ``context`` and what every page shows
    (the namespace, the time, access, the note of a finished change, auto-refresh)."""
    html = await page_html(request, template, context)
    return web.Response(text=html, content_type="text/html", status=status)


async def page_html(
    request: web.Request,
    template: str,
    context: Mapping[str, Any],
    path: str | None = None,
    fixed: Mapping[str, Any] | None = None,
) -> str:
    """The HTML of :func:`render_page`; ``path``: the page's own path when ``request``
    is not for the page itself (its live stream), ``fixed``: what every page shows
    that the stream reads once, not at each refresh (:func:`page_fixtures`)."""
    app = request.app
    client = client_of(request)
    try:
        now_ms = await client.server_time_ms()
    except FloError:
        now_ms = int(datetime.datetime.now(datetime.timezone.utc).timestamp() * 1000)
    refresh = request.query.get("refresh", "")
    kept = {k: v for k, v in request.query.items() if k not in ("done", "refresh")}
    # The page's own path, never read as another site (//evil.example/x is a path).
    here = URL(local_path(path or request.rel_url.path)).with_query(kept)
    home = app[CLIENT].namespace
    return (
        app[TEMPLATES]
        .get_template(template)
        .render(
            **(fixed or await page_fixtures(request)),
            namespace=client.namespace,
            ns_param="" if client.namespace == home else client.namespace,
            now_ms=now_ms,
            done=_done(request),
            refresh=int(refresh) if refresh in ("2", "5", "10", "30") else 0,
            here=str(here),
            refreshing=str(here.update_query(refresh=5)),
            **context,
        )
    )


async def page_fixtures(request: web.Request) -> dict[str, Any]:
    """What a page shows of the request's access (a read of its session, which keeps
    it open) and of the namespaces to switch to."""
    app = request.app
    return {
        "access": await app[GUARD].access(request, client_of(request)),
        "namespaces": await app[SPACES].names(),
    }


def _done(request: web.Request) -> str:
    """The note of a finished change; its only input besides the kind is a count."""
    note = DONE.get(request.query.get("done", ""), "")
    count = request.query.get("n", "")
    # ASCII digits only ("²" is a digit to str.isdigit), and few enough to be a count.
    counted = count.isascii() and count.isdigit() and len(count) <= 12
    return note.format(n=int(count) if counted else "The")


async def error_page(
    request: web.Request, template: str, context: Mapping[str, Any], status: int
) -> web.Response:
    """An error page; when even that cannot be drawn (Redis is gone while the session
    is read), a plain one that needs nothing."""
    try:
        return await render_page(request, template, context, status)
    except Exception:
        log.exception("dashboard error page %s failed", status)
        text = context.get("error") or context.get("why") or ""
        html = f"<!doctype html><title>{status}</title><p>{escape(str(text))}</p>"
        return web.Response(text=html, content_type="text/html", status=status)


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
