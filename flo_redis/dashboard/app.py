"""The dashboard's web application: pages rendered on the server, forms for changes.

Pages are plain HTML from Jinja2 templates with autoescaping on for every value, styled
by one stylesheet shipped in the package, complete without JavaScript. One small script
of the package's own, ``/static/live.js``, refreshes the parts of a page that change
from its live event stream (:mod:`.live`); the Content-Security-Policy allows scripts
and connections from the dashboard itself only (no inline script, no other site).
Changes are POSTed forms that the :class:`~flo_redis.dashboard.guard.Guard` checks
(write access, session, CSRF, origin) before anything is sent to Redis. A page shows
the namespace its ``?ns=`` names (:mod:`.spaces`), the dashboard's own without.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable

from aiohttp import web

from flo_redis.client import FloClient
from flo_redis.dashboard import changes, pages, run_pages, schedule_pages
from flo_redis.dashboard.guard import Guard, Refused, Throttled
from flo_redis.dashboard.live import DEFAULT_MAX_STREAMS, STREAMS, Streams
from flo_redis.dashboard.render import (
    CLIENT,
    GUARD,
    REDACTOR,
    SHOWN,
    SPACES,
    TEMPLATES,
    error_page,
    log,
    templates,
)
from flo_redis.dashboard.spaces import NS_PARAM, Busy, Namespaces
from flo_redis.errors import ConflictError, FloError, NotFoundError, ValidationError
from flo_redis.ops.redaction import NOTHING, Redactor

HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; connect-src 'self'; style-src 'self'; "
        "img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}
_STATUS_OF = (
    (NotFoundError, 404),
    (ValidationError, 400),
    (ConflictError, 409),
    (Busy, 503),
)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def create_app(
    client: FloClient,
    guard: Guard,
    redactor: Redactor = NOTHING,
    *,
    namespaces: Iterable[str] | None = None,
    max_streams: int = DEFAULT_MAX_STREAMS,
) -> web.Application:
    """The dashboard for ``client``'s namespace, and the others ``namespaces`` names
    (None: every namespace on its Redis; :mod:`.spaces`). At most ``max_streams`` live
    pages at once (:mod:`.live`). The client must be connected while the app serves;
    the caller owns it (the app closes the clients it made for other namespaces).
    ``redactor``: what run pages hide (:mod:`flo_redis.ops.redaction`)."""
    app = web.Application(middlewares=[_guarded_pages])
    app.on_response_prepare.append(_secured)
    app[CLIENT] = client
    app[GUARD] = guard
    guard.home = client.namespace
    app[TEMPLATES] = templates()
    app[SPACES] = spaces = Namespaces(client, namespaces)
    app[STREAMS] = streams = Streams(max_streams)
    app.on_shutdown.append(streams.close)
    app.on_cleanup.append(lambda _app: spaces.close())
    app[TEMPLATES].filters["redacted"] = redactor.run  # runs listed with their errors
    app[REDACTOR] = redactor
    app.router.add_get("/", pages.overview)
    app.router.add_get("/action", pages.action)
    app.router.add_get("/run", run_pages.run)
    app.router.add_get("/find", run_pages.find)
    app.router.add_get("/batch", run_pages.batch)
    app.router.add_get("/workers", pages.workers)
    app.router.add_get("/streams", pages.streams)
    app.router.add_get("/group", pages.group)
    app.router.add_get("/quarantine", pages.quarantine)
    app.router.add_get("/login", pages.login_form)
    app.router.add_post("/login", changes.login)
    app.router.add_post("/logout", changes.logout)
    app.router.add_post("/run/requeue", changes.requeue_run)
    app.router.add_post("/run/cancel", changes.cancel_run)
    app.router.add_post("/action/requeue-failed", changes.requeue_failed)
    app.router.add_post("/action/purge", changes.purge)
    app.router.add_post("/worker/drain", changes.drain_worker)
    app.router.add_post("/group/replay", changes.replay)
    app.router.add_post("/quarantine/replay", changes.quarantine_replay)
    app.router.add_post("/quarantine/delete", changes.quarantine_delete)
    schedule_pages.add_routes(app.router)
    app.router.add_get("/static/style.css", pages.stylesheet)
    app.router.add_get("/static/live.js", pages.live_script)
    app.router.add_get("/live/{page:.*}", pages.live_page)
    return app


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
        async with request.app[SPACES].client(await _namespace(request)) as shown:
            request[SHOWN] = shown
            return await handler(request)
    except Throttled as exc:
        response = await error_page(request, "refused.html", {"why": exc.why, "login": False}, 429)
        response.headers["Retry-After"] = str(exc.retry_after_s)
        return response
    except Refused as exc:
        context = {"why": exc.why, "login": exc.login}
        return await error_page(request, "refused.html", context, 403)
    except FloError as exc:
        status = next((code for kind, code in _STATUS_OF if isinstance(exc, kind)), 502)
        return await error_page(request, "error.html", {"error": str(exc)}, status)
    except web.HTTPException as exc:
        if exc.status < 400:  # a redirect after a change
            raise
        response = await error_page(request, "error.html", {"error": exc.reason}, exc.status)
        for name in ("Allow", "Retry-After"):  # 405: the methods the path takes; 503
            if name in exc.headers:
                response.headers[name] = exc.headers[name]
        return response
    except Exception:
        log.exception("dashboard page %s %s failed", request.method, request.rel_url.path)
        context = {"error": "the dashboard failed to answer; its log says why"}
        return await error_page(request, "error.html", context, 500)


async def _namespace(request: web.Request) -> str | None:
    """The namespace a request names: ``?ns=``, or a POSTed form's ``ns`` field."""
    named = request.query.get(NS_PARAM)
    if named is None and request.method == "POST":
        field = (await request.post()).get(NS_PARAM)
        named = field if isinstance(field, str) else None
    return named or None
