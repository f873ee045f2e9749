"""The only place scripts are sent to Redis.

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
from collections import defaultdict
from collections.abc import Iterator, Sequence
from typing import Any, TypeAlias

import redis.exceptions as rex
from redis import Redis as SyncRedis
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.crc import key_slot

from ._lua import LuaScript, load_all
from .errors import (
    InternalServerError,
    NotConnectedError,
    RequestTimeoutError,
    ServerError,
    UnavailableError,
)
from .retry import DEFAULT_RETRY_POLICY, RetryPolicy, is_refused_unrun, retry_refused
from .types import Ran, Reason, StatusCode

RedisConn: TypeAlias = "Redis | RedisCluster"
Arg: TypeAlias = "str | bytes | int"

SCRIPTS: dict[str, LuaScript] = load_all()

log = logging.getLogger("flo_redis.requests")

# How calls on each connection pool are resent and logged (set by the client that made it).
_SETTINGS: weakref.WeakKeyDictionary[Any, tuple[RetryPolicy, bool]] = weakref.WeakKeyDictionary()


def configure(
    conn: RedisConn, *, retry: RetryPolicy = DEFAULT_RETRY_POLICY, debug: bool = False
) -> None:
    """Resend calls on ``conn`` refused without running as ``retry`` allows, and log
    every call when ``debug``. A connection never configured resends by the default
    policy and logs nothing."""
    _SETTINGS[conn] = (retry, debug)


@contextlib.contextmanager
def redis_errors(what: str) -> Iterator[None]:
    """Translate redis-py errors into flo's error tree, naming what was being done."""
    try:
        yield
    except rex.TimeoutError as exc:
        raise RequestTimeoutError(f"{what}: Redis did not answer in time ({exc})") from exc
    except rex.BusyLoadingError as exc:
        err = UnavailableError(f"{what}: Redis is loading its data set; retry shortly")
        err.status_code = StatusCode.UNAVAILABLE
        err.reason = Reason.UNCLASSIFIED
        err.ran = Ran.NO
        raise err from exc
    except rex.ConnectionError as exc:
        raise NotConnectedError(f"{what}: connection to Redis lost ({exc})") from exc
    except (rex.TryAgainError, rex.ClusterDownError, rex.MovedError, rex.AskError) as exc:
        # Redirections redis-py gave up following (a slot in mid-migration, a cluster
        # without a primary for the slot): the command did not run.
        err = UnavailableError(f"{what}: the Redis Cluster is moving this slot ({exc}); retry")
        err.status_code = StatusCode.UNAVAILABLE
        err.reason = Reason.UNCLASSIFIED
        err.ran = Ran.NO
        raise err from exc
    except rex.ClusterError as exc:
        raise UnavailableError(f"{what}: the Redis Cluster did not serve it ({exc})") from exc
    except rex.NoScriptError:
        raise
    except rex.ResponseError as exc:
        raise InternalServerError(f"{what}: Redis refused the command: {exc}") from exc


def _check_arity(script: LuaScript, keys: Sequence[str], args: Sequence[Arg]) -> None:
    keys_ok = (
        len(keys) >= len(script.keys) if script.variadic_keys else len(keys) == len(script.keys)
    )
    args_ok = (
        len(args) >= len(script.argv) if script.variadic_argv else len(args) == len(script.argv)
    )
    if not (keys_ok and args_ok):
        raise TypeError(
            f"{script.name} takes {len(script.keys)} keys and {len(script.argv)} args, "
            f"got {len(keys)} and {len(args)}"
        )


async def call(conn: RedisConn, name: str, keys: Sequence[str], args: Sequence[Arg]) -> Any:
    """Run script ``name`` atomically with ``keys`` and ``args``; return its raw reply.

    A refusal that says the script did not run is resent per the connection's retry
    policy (:func:`configure`); the last refusal is raised once the policy is used up."""
    script = SCRIPTS[name]
    _check_arity(script, keys, args)
    policy, debug = _SETTINGS.get(conn, (DEFAULT_RETRY_POLICY, False))
    if not debug:
        return await retry_refused(lambda: _send(conn, script, keys, args), policy)

    async def send_logged() -> Any:
        log.debug("-> %s %s", name, keys[0] if keys else "")
        try:
            reply = await _send(conn, script, keys, args)
        except Exception as exc:
            log.debug("<- %s %s", name, _failure(exc))
            raise
        log.debug("<- %s %s", name, _reply_summary(reply))
        return reply

    return await retry_refused(send_logged, policy)


async def _send(
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


def call_sync(conn: SyncRedis, name: str, keys: Sequence[str], args: Sequence[Arg]) -> Any:
    """:func:`call` for redis-py's blocking client (``flo_redis.sync``)."""
    script = SCRIPTS[name]
    _check_arity(script, keys, args)
    with redis_errors(name):
        try:
            return conn.evalsha(script.sha, len(keys), *keys, *args)
        except rex.NoScriptError:
            return conn.eval(script.source, len(keys), *keys, *args)


async def call_many(
    conn: RedisConn, calls: Sequence[tuple[str, Sequence[str], Sequence[Arg]]]
) -> list[Any]:
    """Run several scripts, each atomically; replies come back in order.

    On a standalone Redis they go in one round trip (a pipeline); an entry is the
    exception a single call would have raised turned into a value only for ``NOSCRIPT``,
    which is retried for that entry alone (a script that answered NOSCRIPT did not run,
    so nothing runs twice). On a cluster (where redis-py refuses ``EVALSHA`` in
    pipelines) the calls of one hash slot run one after another, in order, and the
    slots run concurrently.
    """
    for name, keys, args in calls:
        _check_arity(SCRIPTS[name], keys, args)
    if isinstance(conn, RedisCluster):
        return await _call_many_cluster(conn, calls)
    with redis_errors("pipeline"):
        async with conn.pipeline(transaction=False) as pipe:
            for name, keys, args in calls:
                pipe.evalsha(SCRIPTS[name].sha, len(keys), *keys, *args)
            replies: list[Any] = await pipe.execute(raise_on_error=False)
    for i, reply in enumerate(replies):
        if not isinstance(reply, Exception):
            continue
        name, keys, args = calls[i]
        try:
            with redis_errors(name):
                raise reply
        except rex.NoScriptError:
            replies[i] = await call(conn, name, keys, args)
        except ServerError as exc:
            if not is_refused_unrun(exc):
                raise
            replies[i] = await call(conn, name, keys, args)  # did not run: resent per policy
    return replies


async def _call_many_cluster(
    conn: RedisCluster, calls: Sequence[tuple[str, Sequence[str], Sequence[Arg]]]
) -> list[Any]:
    by_slot: dict[int, list[int]] = defaultdict(list)
    for i, (_, keys, _) in enumerate(calls):
        by_slot[key_slot(keys[0].encode()) if keys else -1].append(i)
    replies: list[Any] = [None] * len(calls)

    async def run(indexes: list[int]) -> None:
        for i in indexes:
            name, keys, args = calls[i]
            replies[i] = await call(conn, name, keys, args)

    await asyncio.gather(*(run(indexes) for indexes in by_slot.values()))
    return replies
