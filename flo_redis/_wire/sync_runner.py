"""The script runner of redis-py's blocking client (``flo_redis.sync``): the same calls
as :class:`flo_redis._wire.runner.ScriptRunner`, with the same fallbacks
(:mod:`flo_redis._wire.fallback`) and error translation, one call at a time per thread.
Each :class:`~flo_redis.sync.SyncFloClient` owns one; nothing is shared between clients.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Sequence
from typing import Any, TypeAlias

import redis.exceptions as rex
from redis import Redis
from redis.cluster import RedisCluster

from flo_redis._wire import functions as _functions
from flo_redis._wire.durable import MOVED_OR_GONE, sync_pair
from flo_redis._wire.fallback import EVAL, FCALL, Way, ways
from flo_redis._wire.functions import Functions
from flo_redis._wire.lane import Arg, pooled_call_sync
from flo_redis._wire.library import LIBRARY
from flo_redis._wire.lua import LuaScript
from flo_redis._wire.translate import redis_errors
from flo_redis.durability import Durability

SyncConn: TypeAlias = "Redis | RedisCluster"


class SyncScriptRunner:
    """How one blocking client's scripts are sent on ``conn``. On a plain ``Redis`` they
    are called as functions (by SHA under ``FLO_REDIS_SCRIPTS=evalsha``, read at the
    first call); on a cluster by SHA. Safe to share between threads: redis-py's pool
    hands each call its own connection, and the library is checked or loaded by one
    thread at a time."""

    __slots__ = ("_functions", "_made", "conn", "durability", "server_version")

    def __init__(self, conn: SyncConn, durability: Durability = Durability.PRIMARY) -> None:
        self.conn = conn
        # The level of the client's writes that name none; the server's version, once
        # the client checked it (a level whose command it lacks is refused unsent).
        self.durability = durability
        self.server_version = ""
        self._functions: Functions | None = None
        self._made = threading.Lock()

    def run(
        self,
        script: LuaScript,
        keys: Sequence[str],
        args: Sequence[Arg],
        wait: Durability | None = None,
    ) -> Any:
        """Run ``script`` atomically with ``keys`` and ``args``; its raw reply, or flo's
        error; with ``wait``, followed by that level's wait on the same connection, and
        the answer is both replies (:mod:`flo_redis._wire.durable`). A call answered
        ``READONLY`` did not run: the pool's idle connections are closed and it is sent
        once more, connecting again, to the primary (a failover made the server at this
        address a replica)."""
        if wait is not None:
            wait.check_server(self.server_version)
        with redis_errors(script.name):
            try:
                return self._send(script, keys, args, wait)
            except rex.ReadOnlyError:
                if isinstance(self.conn, Redis):
                    with contextlib.suppress(Exception):  # it can fail only as the socket did
                        self.conn.connection_pool.disconnect(inuse_connections=False)
            return self._send(script, keys, args, wait)

    def _function_state(self) -> Functions | None:
        """The client's function state, made at its first call; None on a cluster."""
        if not isinstance(self.conn, Redis):
            return None
        functions = self._functions
        if functions is None:
            wanted = _functions.functions_wanted()
            with self._made:
                if self._functions is None:
                    self._functions = Functions(LIBRARY, on=wanted)
                functions = self._functions
        return functions

    def _send(
        self,
        script: LuaScript,
        keys: Sequence[str],
        args: Sequence[Arg],
        wait: Durability | None,
    ) -> Any:
        """One send of the call, each way :func:`ways` gives in turn until one answers;
        redis-py's error when none does."""
        functions = self._function_state()
        plan = ways(functions)
        way = next(plan)
        while True:
            try:
                return self._call(functions, script, way, keys, args, wait)
            except rex.RedisError as exc:
                failed = exc
            way = plan.send(failed)

    def _call(
        self,
        functions: Functions | None,
        script: LuaScript,
        way: Way,
        keys: Sequence[str],
        args: Sequence[Arg],
        wait: Durability | None,
    ) -> Any:
        conn = self.conn
        if wait is not None:
            name = {FCALL: script.function, EVAL: script.source}.get(way, script.sha)
            verify = functions.verify_sync if way == FCALL and functions is not None else None
            return self._paired((way, name, len(keys), *keys, *args), keys[0], wait, verify)
        if way == FCALL:
            assert functions is not None and isinstance(conn, Redis)
            command = ("FCALL", script.function, len(keys), *keys, *args)
            return pooled_call_sync(conn.connection_pool, functions.verify_sync, *command)
        if way == EVAL:
            return conn.eval(script.source, len(keys), *keys, *args)  # type: ignore[no-untyped-call, unused-ignore]
        return conn.evalsha(script.sha, len(keys), *keys, *args)  # type: ignore[no-untyped-call, unused-ignore]

    def _paired(
        self,
        command: Sequence[Arg],
        key: str,
        wait: Durability,
        verify: Callable[[Any], None] | None,
    ) -> Any:
        """``command`` followed by ``wait``'s wait on one connection: of the pool
        (``verify`` called with it first), or of the cluster node that owns ``key``."""
        conn = self.conn
        if isinstance(conn, Redis):
            pool = conn.connection_pool
            connection = pool.get_connection()
            try:
                return sync_pair(connection, command, wait, verify)
            finally:
                pool.release(connection)
        node = conn.get_node_from_key(key)  # type: ignore[no-untyped-call]
        connection = conn.get_redis_connection(node).connection_pool.get_connection()
        try:
            return sync_pair(connection, command, wait, None)
        except MOVED_OR_GONE:
            with contextlib.suppress(rex.RedisError, OSError):  # the call's error answers
                conn.nodes_manager.initialize()
            raise
        finally:
            conn.get_redis_connection(node).connection_pool.release(connection)
