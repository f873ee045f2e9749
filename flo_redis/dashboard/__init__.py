"""A web dashboard to see and steer one namespace's queues (``flo-redis dashboard``).

Needs the ``dashboard`` extra (``pip install 'flo-redis[dashboard]'``). Safe by default:
it binds 127.0.0.1 and is read-only; started with a write token it accepts changes
(requeue, drain, replay) from a browser that logged in with that token, through
CSRF-checked forms. Every value on a page is HTML-escaped.

In a program (the command does the same)::

    running = await start_dashboard(client, port=8080, token=None)
    ...
    await running.close()
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass

from flo_redis.ops import needs_extra

with needs_extra("dashboard", "the flo-redis dashboard"):
    from aiohttp import web

from flo_redis.client import FloClient
from flo_redis.dashboard.app import HEADERS, create_app
from flo_redis.dashboard.guard import Guard, SessionPolicy, is_loopback
from flo_redis.dashboard.live import DEFAULT_MAX_STREAMS
from flo_redis.ops.redaction import NOTHING, Redactor

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8080


class _SecuredRequest(web.Request):
    """A request whose every answer gets the security headers, also one aiohttp makes
    itself for a request it could not read (which never reaches the app's hooks)."""

    async def _prepare_hook(self, response: web.StreamResponse) -> None:
        response.headers.update(HEADERS)
        await super()._prepare_hook(response)


@dataclass
class RunningDashboard:
    """A dashboard serving at ``url`` until :meth:`close`."""

    url: str
    _runner: web.AppRunner

    async def close(self) -> None:
        await self._runner.cleanup()


async def start_dashboard(
    client: FloClient,
    *,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    token: str | None = None,
    origins: Iterable[str] = (),
    policy: SessionPolicy | None = None,
    namespaces: Iterable[str] | None = None,
    max_streams: int = DEFAULT_MAX_STREAMS,
    redactor: Redactor = NOTHING,
) -> RunningDashboard:
    """Serve the dashboard of ``client``'s namespace at ``http://host:port/`` (port 0:
    a free one). With ``token`` (16 characters or more) it accepts changes from a browser
    that logged in with it; without, it is read-only. ``origins``: the addresses a
    browser reaches it at through a reverse proxy (``https://dash.example.com``), whose
    requests and changes it then accepts too (:mod:`.guard`); ValueError for one that
    is not an origin. ``policy``: how long sessions last and how failed log-ins are
    throttled (:class:`~.guard.SessionPolicy`; its defaults without). ``namespaces``:
    the other namespaces its switcher may show (None: every namespace on the Redis;
    :mod:`.spaces`). ``max_streams``: live pages open at once (:mod:`.live`).
    ``redactor``: what run pages hide of inputs, outputs, progress and errors
    (:func:`flo_redis.ops.redaction.redactor`). ``client`` must stay connected.

    Every answer carries the security headers (:data:`.app.HEADERS`), the errors aiohttp
    gives for a request it cannot read (before the app sees it) included."""
    guard = Guard(token, loopback_only=is_loopback(host), origins=origins, policy=policy)
    app = create_app(client, guard, redactor, namespaces=namespaces, max_streams=max_streams)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    assert runner.server is not None
    runner.server.request_factory = functools.partial(app._make_request, _cls=_SecuredRequest)
    site = web.TCPSite(runner, host, port)
    await site.start()
    bound = runner.addresses[0][1] if runner.addresses else port
    shown = f"[{host}]" if ":" in host else host
    return RunningDashboard(f"http://{shown}:{bound}/", runner)


__all__ = [
    "DEFAULT_HOST",
    "DEFAULT_PORT",
    "RunningDashboard",
    "SessionPolicy",
    "create_app",
    "start_dashboard",
]
