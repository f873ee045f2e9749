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
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import defaultdict
from collections.abc import Iterator, Sequence
from typing import Any, TypeAlias

import redis.exceptions as rex
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.crc import key_slot

from ._lua import LuaScript, load_all
from .errors import InternalServerError, NotConnectedError, RequestTimeoutError, UnavailableError
from .types import Ran, Reason, StatusCode

RedisConn: TypeAlias = "Redis | RedisCluster"
Arg: TypeAlias = "str | bytes | int"

SCRIPTS: dict[str, LuaScript] = load_all()


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
    """Run script ``name`` atomically with ``keys`` and ``args``; return its raw reply."""
    script = SCRIPTS[name]
    _check_arity(script, keys, args)
    with redis_errors(name):
        try:
            return await conn.evalsha(script.sha, len(keys), *keys, *args)
        except rex.NoScriptError:
            return await conn.eval(script.source, len(keys), *keys, *args)


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
        if isinstance(reply, rex.NoScriptError):
            name, keys, args = calls[i]
            replies[i] = await call(conn, name, keys, args)
        elif isinstance(reply, Exception):
            with redis_errors(calls[i][0]):
                raise reply
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
