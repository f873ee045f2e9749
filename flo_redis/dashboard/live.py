"""Live pages: a server-sent event stream per open page, and the regions it refreshes.

A page marks what may change under it with ``data-live="<name>"`` on an element (the
counts, the recent failures, the workers table). ``/static/live.js``, served by the
dashboard itself (the Content-Security-Policy allows scripts and connections to
``'self'`` only), opens ``GET /live/<page path>?<page query>`` and, for each event,
replaces the inside of the element of that name. Without JavaScript nothing changes:
the page is complete as the server drew it, and its refresh link still works.

The stream is a GET like the pages: the guard's host check and the namespace rules
apply, and its forms carry the session's CSRF value as the page's do. Every
:data:`INTERVAL_S` it reads what the page shows, through the page's own view, draws the
page, and sends the regions whose HTML changed since the last event (the first event
sends them all). It is bounded: at most ``max_streams`` at once (more are answered 503
with Retry-After), and each ends when its browser goes away, after
:data:`MAX_STREAM_S` (the browser opens it again), or when the dashboard shuts down,
before aiohttp waits for its handlers.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from html.parser import HTMLParser
from typing import Any

from aiohttp import web

from flo_redis.errors import FloError

log = logging.getLogger("flo_redis.dashboard")

INTERVAL_S = 1.5  # between two reads of one page's figures
MAX_STREAM_S = 600.0  # a stream ends after this; the browser opens it again
DEFAULT_MAX_STREAMS = 32  # streams open at once, over every page and browser
RETRY_MS = 3000  # how soon a browser opens a stream again after it ended

View = Callable[[web.Request], Awaitable[tuple[str, Mapping[str, Any]]]]
Draw = Callable[[web.Request, str, Mapping[str, Any], str, Mapping[str, Any]], Awaitable[str]]
Fixtures = Callable[[web.Request], Awaitable[Mapping[str, Any]]]


class Streams:
    """The open streams: how many (at most ``limit``) and the event that ends them all."""

    def __init__(self, limit: int = DEFAULT_MAX_STREAMS) -> None:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
            raise ValueError(f"max_streams is a count of 0 or more, got {limit!r}")
        self.limit = limit
        self.open = 0
        self.closing = asyncio.Event()

    async def close(self, _app: web.Application | None = None) -> None:
        """End every stream now (the app's on_shutdown: before aiohttp waits for its
        handlers, so no open page holds a shutdown up)."""
        self.closing.set()


STREAMS: web.AppKey[Streams] = web.AppKey("live_streams", Streams)


async def stream(
    request: web.Request, view: View, draw: Draw, fixtures: Fixtures, path: str
) -> web.StreamResponse:
    """The event stream of the page at ``path`` (its query is the request's), drawn
    by ``view`` and ``draw`` as the page is; ``fixtures``: what it reads once (the
    session's access: an open page does not keep a session from its idle end)."""
    streams = request.app[STREAMS]
    if streams.open >= streams.limit or streams.closing.is_set():
        raise web.HTTPServiceUnavailable(
            reason="too many live pages are open; this one refreshes by reload",
            headers={"Retry-After": "10"},
        )
    streams.open += 1
    try:
        return await _serve(request, view, draw, await fixtures(request), path, streams)
    finally:
        streams.open -= 1


async def _serve(
    request: web.Request,
    view: View,
    draw: Draw,
    fixed: Mapping[str, Any],
    path: str,
    streams: Streams,
) -> web.StreamResponse:
    response = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "X-Accel-Buffering": "no"}
    )
    await response.prepare(request)
    try:
        await _follow(request, response, view, draw, fixed, path, streams)
    except ConnectionResetError:  # the browser went away while an event was sent
        pass
    except Exception:  # the answer has begun: no error page now, only the log
        log.exception("live page %s failed; its stream ends", path)
    return response


async def _follow(
    request: web.Request,
    response: web.StreamResponse,
    view: View,
    draw: Draw,
    fixed: Mapping[str, Any],
    path: str,
    streams: Streams,
) -> None:
    """Send the page's regions as they change, until the stream is to end."""
    await response.write(f"retry: {RETRY_MS}\n\n".encode())
    sent: dict[str, str] = {}
    loop = asyncio.get_running_loop()
    ends = loop.time() + MAX_STREAM_S
    while not streams.closing.is_set() and loop.time() < ends and _connected(request):
        try:
            template, context = await view(request)
            regions = live_regions(await draw(request, template, context, path, fixed))
        except FloError as exc:  # Redis away for a moment: say so, try again
            log.debug("live page %s not read: %s", path, exc)
            await _send(response, "stale", {"why": str(exc)})
        else:
            changed = {k: v for k, v in regions.items() if sent.get(k) != v}
            for name, html in changed.items():
                await _send(response, "region", {"name": name, "html": html})
            sent.update(changed)
            if not changed:
                await response.write(b": idle\n\n")  # finds a browser that went away
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(streams.closing.wait(), INTERVAL_S)


def _connected(request: web.Request) -> bool:
    transport = request.transport
    return transport is not None and not transport.is_closing()


async def _send(response: web.StreamResponse, event: str, data: Mapping[str, str]) -> None:
    """One event; its data is one line of JSON (JSON escapes every line break)."""
    await response.write(f"event: {event}\ndata: {json.dumps(data)}\n\n".encode())


_VOID = frozenset(
    [
        "area",
        "base",
        "br",
        "col",
        "embed",
        "hr",
        "img",
        "input",
        "link",
        "meta",
        "source",
        "track",
        "wbr",
    ]
)


def live_regions(html: str) -> dict[str, str]:
    """The inside of every element of ``html`` marked ``data-live="<name>"``, by name
    (a region inside another is part of the outer one's HTML, and also its own)."""

    class Finder(HTMLParser):
        def __init__(self) -> None:
            super().__init__(convert_charrefs=False)
            self.stack: list[tuple[str, str | None, int]] = []
            self.found: dict[str, str] = {}
            self.lines = [0]
            for line in html.splitlines(keepends=True):
                self.lines.append(self.lines[-1] + len(line))

        def _at(self) -> int:
            line, col = self.getpos()
            return self.lines[line - 1] + col

        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            if tag in _VOID:
                return
            name = dict(attrs).get("data-live")
            text = self.get_starttag_text() or ""
            self.stack.append((tag, name, self._at() + len(text)))

        def handle_endtag(self, tag: str) -> None:
            while self.stack:
                open_tag, name, start = self.stack.pop()
                if name:
                    self.found[name] = html[start : self._at()]
                if open_tag == tag:
                    return

    finder = Finder()
    finder.feed(html)
    finder.close()
    return finder.found


__all__ = ["DEFAULT_MAX_STREAMS", "STREAMS", "Streams", "live_regions", "stream"]
