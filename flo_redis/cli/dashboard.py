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
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

import click

from flo_redis.cli._ops import until_stopped
from flo_redis.cli._options import F, Seconds, env_option, namespace_option, url_option
from flo_redis.cli._render import say
from flo_redis.cli.run_view import redact_options, redactor_of
from flo_redis.client import FloClient
from flo_redis.errors import FloError

if TYPE_CHECKING:
    from flo_redis.dashboard.guard import SessionPolicy
    from flo_redis.ops.redaction import Redactor

TOKEN_ENV = "FLO_REDIS_DASHBOARD_TOKEN"
_MAX_SESSION_S = 365 * 86400


async def _serve(
    url: str,
    namespace: str,
    host: str,
    port: int,
    token: str | None,
    origins: tuple[str, ...],
    policy: SessionPolicy,
    shown: tuple[str, ...] | None,
    redactor: Redactor,
) -> int:
    from flo_redis.dashboard import start_dashboard

    client = FloClient(url, namespace=namespace)
    try:
        await client.connect()
    except FloError as exc:
        say(f"flo-redis dashboard: {exc}", err=True)
        return 1
    try:
        try:
            running = await start_dashboard(
                client,
                host=host,
                port=port,
                token=token,
                origins=origins,
                policy=policy,
                namespaces=shown,
                redactor=redactor,
            )
        except OSError as exc:
            say(f"flo-redis dashboard: cannot listen on {host}:{port}: {exc}", err=True)
            return 1
        except FloError as exc:  # a --show-namespace that is not a name
            say(f"flo-redis dashboard: {exc}", err=True)
            return 1
        mode = "changes allowed after log-in with the token" if token else "read-only"
        say(f"dashboard of namespace {namespace!r} at {running.url} ({mode}); Ctrl-C stops")
        try:
            await until_stopped()
        finally:
            await running.close()
    finally:
        await client.close()
    return 0


def _origins(
    _ctx: click.Context, _param: click.Parameter, value: tuple[str, ...]
) -> tuple[str, ...]:
    from flo_redis.dashboard.guard import public_origin

    try:
        return tuple(public_origin(origin) for origin in value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def _session_seconds(flag: str, meaning: str, default_s: int) -> Callable[[F], F]:
    """A session length in seconds: unset (None) unless given, the policy's own default
    (``default_s``, for the help line) then holds."""
    return env_option(
        flag,
        f"Seconds {meaning}; default {default_s}",
        type=Seconds(1, _MAX_SESSION_S),
        default=None,
        show_default=False,
    )


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
@click.option(
    "--show-namespace",
    "shown",
    multiple=True,
    metavar="NAME",
    help="Another namespace the switcher may show (repeatable; '' for none). Without: "
    "every namespace on the Redis that its user may list.",
)
@_session_seconds("--session-idle", "a logged-in browser's session lasts without a request", 1800)
@_session_seconds("--session-max", "a session lasts at most after its log-in, used or not", 28800)
@redact_options
def dashboard_command(
    url: str,
    namespace: str,
    host: str,
    port: int,
    write: bool,
    origins: tuple[str, ...],
    shown: tuple[str, ...],
    session_idle: float | None,
    session_max: float | None,
    redact: str | None,
    redact_keys: str | None,
) -> None:
    """Serve a web dashboard of the namespace's actions, runs, workers and streams."""
    redactor = redactor_of(redact, redact_keys)
    token: str | None = None
    if write:
        token = os.environ.get(TOKEN_ENV) or None
        if token is None:
            token = secrets.token_urlsafe(24)
            say(f"write token (log in with it; set {TOKEN_ENV} to choose one): {token}")
        elif len(token) < 16:
            raise click.BadParameter(f"${TOKEN_ENV} must be at least 16 characters")
    with contextlib.suppress(KeyboardInterrupt):
        from flo_redis.dashboard.guard import SessionPolicy

        default = SessionPolicy()
        policy = SessionPolicy(
            idle_s=default.idle_s if session_idle is None else session_idle,
            max_s=default.max_s if session_max is None else session_max,
        )
        others = tuple(n for n in shown if n) if shown else None
        served = _serve(url, namespace, host, port, token, origins, policy, others, redactor)
        sys.exit(asyncio.run(served))


def register(group: click.Group) -> None:
    group.add_command(dashboard_command)
