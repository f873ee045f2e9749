"""``flo-redis dashboard``: the web dashboard of one namespace, until Ctrl-C.

Read-only unless started with ``--write``; then changes need the token from
``FLO_REDIS_DASHBOARD_TOKEN`` (or one drawn at start and printed once), typed into the
dashboard's log-in page. Binds 127.0.0.1 unless ``--host`` says otherwise; behind a
reverse proxy, ``--origin https://dash.example.com`` names the address browsers use.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import signal
import sys

import click

from ..client import FloClient
from ..errors import FloError
from ._options import namespace_option, url_option
from ._render import say

TOKEN_ENV = "FLO_REDIS_DASHBOARD_TOKEN"


async def _serve(
    url: str, namespace: str, host: str, port: int, token: str | None, origins: tuple[str, ...]
) -> int:
    from ..dashboard import start_dashboard

    client = FloClient(url, namespace=namespace)
    try:
        await client.connect()
    except FloError as exc:
        say(f"flo-redis dashboard: {exc}", err=True)
        return 1
    try:
        try:
            running = await start_dashboard(
                client, host=host, port=port, token=token, origins=origins
            )
        except OSError as exc:
            say(f"flo-redis dashboard: cannot listen on {host}:{port}: {exc}", err=True)
            return 1
        mode = "changes allowed after log-in with the token" if token else "read-only"
        say(f"dashboard of namespace {namespace!r} at {running.url} ({mode}); Ctrl-C stops")
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        try:
            await stop.wait()
        finally:
            await running.close()
    finally:
        await client.close()
    return 0


def _origins(
    _ctx: click.Context, _param: click.Parameter, value: tuple[str, ...]
) -> tuple[str, ...]:
    from ..dashboard.guard import public_origin

    try:
        return tuple(public_origin(origin) for origin in value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


@click.command("dashboard")
@url_option
@namespace_option("to show")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option(
    "--port", type=click.IntRange(0, 65535), default=8080, show_default=True, help="Port."
)
@click.option(
    "--write",
    is_flag=True,
    help=f"Allow changes (requeue, drain, replay) after log-in with the token in ${TOKEN_ENV}; "
    "without it one is drawn and printed.",
)
@click.option(
    "--origin",
    "origins",
    multiple=True,
    callback=_origins,
    metavar="URL",
    help="The address browsers reach the dashboard at through a reverse proxy, like "
    "https://dash.example.com (repeatable): requests addressed to it and changes sent "
    "from it are accepted.",
)
def dashboard_command(
    url: str, namespace: str, host: str, port: int, write: bool, origins: tuple[str, ...]
) -> None:
    """Serve a web dashboard of the namespace's actions, runs, workers and streams."""
    token: str | None = None
    if write:
        token = os.environ.get(TOKEN_ENV) or None
        if token is None:
            token = secrets.token_urlsafe(24)
            say(f"write token (log in with it; set {TOKEN_ENV} to choose one): {token}")
        elif len(token) < 16:
            raise click.BadParameter(f"${TOKEN_ENV} must be at least 16 characters")
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(asyncio.run(_serve(url, namespace, host, port, token, origins)))


def register(group: click.Group) -> None:
    group.add_command(dashboard_command)
