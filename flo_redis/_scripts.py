"""The only place scripts are sent to Redis (:func:`run`, :func:`run_sync`); the typed
gateway in front of it is :mod:`flo_redis._gateway`.

Scripts are called by SHA (``EVALSHA``); a server that does not know the SHA (restart,
``SCRIPT FLUSH``, a new cluster node) answers ``NOSCRIPT`` and the call is repeated once
with the full source (``EVAL``), which also caches it there. The SHA is the hash of the
flattened source, so a fleet running mixed versions never runs another version's code.
Connection failures surface as flo's connection errors (:func:`redis_errors`).

On Redis Cluster every script's keys share one hash slot (``keys.py``), and redis-py
routes each call by its keys to the primary owning that slot, following ``MOVED`` and
``ASK``; ``NOSCRIPT`` is answered per node, so the ``EVAL`` fallback loads the script on
the node that ran it. A slot in the middle of a migration may answer ``TRYAGAIN`` until
its keys have moved; redis-py retries for a while, then the call is refused as
:class:`UnavailableError` (it did not run, so it is safe to repeat).

Resending is decided here and nowhere else: a call refused *without running* (Redis
``LOADING``, ``TRYAGAIN``, a cluster redirection redis-py gave up following — each
raised with ``ran == Ran.NO``) is sent again as the client's :class:`RetryPolicy`
allows (:func:`configure`); a call that may have run (a lost connection, a timeout, an
answer of any kind) is never resent. With ``debug`` each call and its answer is logged
on ``flo_redis.requests`` at DEBUG.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import weakref
from collections.abc import Iterator, Sequence
from typing import Any, TypeAlias

import redis.exceptions as rex
from redis import Redis as SyncRedis
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.cluster import RedisCluster as SyncRedisCluster

from ._denied import denied, is_denied
from ._lua import LuaScript, load_all
from .errors import (
    InternalServerError,
    NotConnectedError,
    ProtocolError,
    RequestTimeoutError,
    ServerError,
    UnavailableError,
    ValidationError,
    server_error,
)
from .retry import DEFAULT_RETRY_POLICY, RetryPolicy, retry_refused
from .types import Ran, Reason, StatusCode

RedisConn: TypeAlias = "Redis | RedisCluster"
SyncConn: TypeAlias = "SyncRedis | SyncRedisCluster"  # flo_redis.sync
Arg: TypeAlias = "str | bytes | int"

SCRIPTS: dict[str, LuaScript] = load_all()

log = logging.getLogger("flo_redis.requests")

# How calls on each connection pool are resent, logged and limited (set by its client).
_SETTINGS: weakref.WeakKeyDictionary[Any, tuple[RetryPolicy, bool, asyncio.Semaphore | None]] = (
    weakref.WeakKeyDictionary()
)


def configure(
    conn: RedisConn,
    *,
    retry: RetryPolicy = DEFAULT_RETRY_POLICY,
    debug: bool = False,
    max_in_flight: int = 0,
) -> None:
    """Resend calls on ``conn`` refused without running as ``retry`` allows, log every
    call when ``debug``, and with ``max_in_flight`` let at most that many script calls
    be in flight at once (the others wait their turn): for a pool that raises at its
    limit instead of waiting (redis-py's cluster pools). A connection never configured
    resends by the default policy, logs nothing and limits nothing."""
    gate = asyncio.Semaphore(max_in_flight) if max_in_flight > 0 else None
    _SETTINGS[conn] = (retry, debug, gate)


def _unavailable(message: str) -> ServerError:
    """An UnavailableError for a command that did not run: safe to send again."""
    return server_error(StatusCode.UNAVAILABLE, Reason.UNCLASSIFIED, message, Ran.NO)


@contextlib.contextmanager
def redis_errors(what: str) -> Iterator[None]:
    """Translate redis-py errors into flo's error tree, naming what was being done."""
    try:
        yield
    except rex.TimeoutError as exc:
        raise RequestTimeoutError(f"{what}: Redis did not answer in time ({exc})") from exc
    except rex.BusyLoadingError as exc:
        raise _unavailable(f"{what}: Redis is loading its data set; retry shortly") from exc
    except rex.ConnectionError as exc:
        raise NotConnectedError(f"{what}: connection to Redis lost ({exc})") from exc
    except (rex.TryAgainError, rex.ClusterDownError, rex.MovedError, rex.AskError) as exc:
        # Redirections redis-py gave up following (a slot in mid-migration, a cluster
        # without a primary for the slot): the command did not run.
        raise _unavailable(f"{what}: the Redis Cluster is moving this slot ({exc}); retry") from exc
    except rex.ClusterError as exc:
        raise UnavailableError(f"{what}: the Redis Cluster did not serve it ({exc})") from exc
    except rex.NoScriptError:
        raise
    except rex.DataError as exc:
        # A value redis-py cannot send: refused before anything reached Redis.
        raise ValidationError(f"{what}: {exc}") from exc
    except rex.ResponseError as exc:
        if is_denied(exc):
            raise denied(what, exc, SCRIPTS) from exc
        raise InternalServerError(f"{what}: Redis refused the command: {exc}") from exc
    except rex.RedisError as exc:
        # What answered is not speaking Redis's protocol (an HTTP server at the URL, a
        # TLS port spoken to in plain text ...), or redis-py refused a value.
        raise ProtocolError(f"{what}: unexpected answer from the server ({exc})") from exc


async def run(conn: RedisConn, script: LuaScript, keys: Sequence[str], args: Sequence[Arg]) -> Any:
    """Run ``script`` atomically with ``keys`` and ``args``; return its raw reply.

    With :func:`run_sync`, the one place a script is sent: the typed gateway
    (:mod:`flo_redis._gateway`) builds the call, this sends it. A refusal that says the
    script did not run is resent per the connection's retry policy (:func:`configure`);
    the last refusal is raised once the policy is used up."""
    policy, debug, gate = _SETTINGS.get(conn, (DEFAULT_RETRY_POLICY, False, None))
    if not debug:
        return await retry_refused(lambda: _send(conn, script, keys, args, gate), policy)
    name = script.name

    async def send_logged() -> Any:
        log.debug("-> %s %s", name, keys[0] if keys else "")
        try:
            reply = await _send(conn, script, keys, args, gate)
        except Exception as exc:
            log.debug("<- %s %s", name, _failure(exc))
            raise
        log.debug("<- %s %s", name, _reply_summary(reply))
        return reply

    return await retry_refused(send_logged, policy)


def run_sync(conn: SyncConn, script: LuaScript, keys: Sequence[str], args: Sequence[Arg]) -> Any:
    """:func:`run` for redis-py's blocking client (``flo_redis.sync``)."""
    with redis_errors(script.name):
        try:
            return conn.evalsha(script.sha, len(keys), *keys, *args)
        except rex.NoScriptError:
            return conn.eval(script.source, len(keys), *keys, *args)


async def _send(
    conn: RedisConn,
    script: LuaScript,
    keys: Sequence[str],
    args: Sequence[Arg],
    gate: asyncio.Semaphore | None,
) -> Any:
    async with gate or contextlib.nullcontext():
        return await _send_now(conn, script, keys, args)


async def _send_now(
    conn: RedisConn, script: LuaScript, keys: Sequence[str], args: Sequence[Arg]
) -> Any:
    with redis_errors(script.name):
        try:
            return await conn.evalsha(script.sha, len(keys), *keys, *args)
        except rex.NoScriptError:
            return await conn.eval(script.source, len(keys), *keys, *args)


def _failure(exc: Exception) -> str:
    if isinstance(exc, ServerError):
        ran = ", not run" if exc.ran == Ran.NO else ""
        return f"{exc.status_code.name}{ran}: {exc}"
    return f"failed: {exc}"


def _reply_summary(reply: Any) -> str:
    if isinstance(reply, list) and reply and isinstance(reply[0], int):
        return f"status {reply[0]}, {len(reply)} items"
    return type(reply).__name__
