"""The script runner: the one place scripts are sent to Redis. Each client's session
owns one :class:`ScriptRunner` (``flo_redis.sync``'s client a
:class:`~flo_redis._wire.sync_runner.SyncScriptRunner`); the typed gateway in front of
it is :mod:`flo_redis._wire.gateway`. Nothing of the transport is module state: two
clients never share a runner, and ending one runner changes nothing for another.

On one Redis (not a cluster) scripts are called as Redis Functions (``FCALL``) of one
library holding them all (:func:`flo_redis._wire.lua.library`): Redis ran the library's
helpers once, when it was loaded, so a call runs its own script's code alone. A server
that does not have the library (a new server, a restart without persistence,
``FUNCTION FLUSH``) answers "Function not found": the library is loaded
(``FUNCTION LOAD``, one load at a time per client) and the call sent again. A client
that may not call or load functions (an ACL user without ``+fcall``; a proxy that does
not know the command) calls its scripts by SHA from then on, as it does on a cluster
(redis-py asks the server for an ``FCALL``'s keys before routing it, a round trip per
call). A call Redis refuses as out of memory is sent by SHA too: a function that may
write is refused before it starts, while a script is refused only at its first write,
so reading (counts, listings) goes on as before. ``FLO_REDIS_SCRIPTS=evalsha`` in the
environment makes every client connected from then on call by SHA from its first call
(:mod:`flo_redis._wire.functions`).

By SHA (``EVALSHA``), a server that does not know the SHA (restart, ``SCRIPT FLUSH``, a
new cluster node) answers ``NOSCRIPT`` and the call is repeated once with the full
source (``EVAL``), which also caches it there. The SHA is the hash of the flattened
source, and the library's name a hash of them all, so a fleet running mixed versions
never runs another version's code. That order of fallbacks is written once, in
:mod:`flo_redis._wire.fallback`, for both runners. Connection failures surface as flo's
connection errors (:mod:`flo_redis._wire.translate`).

On Redis Cluster every script's keys share one hash slot (``keys.py``), and redis-py
routes each call by its keys to the primary owning that slot, following ``MOVED`` and
``ASK``; ``NOSCRIPT`` is answered per node, so the ``EVAL`` fallback loads the script on
the node that ran it. A slot in the middle of a migration may answer ``TRYAGAIN`` until
its keys have moved; redis-py retries for a while, then gives up ("TTL exhausted"), and
the call is refused as :class:`UnavailableError` that did not run, resent as below.

Resending is decided here and nowhere else: a call refused *without running* (Redis
``LOADING``, ``TRYAGAIN``, a cluster redirection redis-py gave up following,
``READONLY`` — each raised with ``ran == Ran.NO``) is sent again as the runner's
:class:`RetryPolicy` allows; a call that may have run (a lost connection, a timeout, an
answer of any kind) is never resent. With ``debug`` each call and its answer is logged
on ``flo_redis.requests`` at DEBUG.

On one Redis (not a cluster) a call made while no other script call is in flight takes
the runner's *lane* (:mod:`flo_redis._wire.lane`): a connection of its pool kept aside for
script calls, the command written as bytes packed ahead; a second, the *spare lane*, is
taken while the first is busy, and a call that finds both busy goes through the pool.
Either way the call is the same, with the same fallbacks, error translation and
resending.

A Redis that answers ``READONLY`` was made a replica by a failover while this client
stayed connected to it (a managed Redis moves its primary's address to the replica it
promotes; connections made before stay where they were, and nothing closes them): every
write there is refused, and nothing reconnects by itself. Its scripts refused at their
first write, so nothing ran; the runner then closes its idle pooled connections and its
lanes, so the call's resend (and every later call) connects again through the address,
to the primary, and tells its ``on_replica``, which moves the session's subscriptions
too: on a replica they would still hear what the primary publishes, but the primary
counts none of them (liveness, hand-offs).

A call on the lane may be *led* by a ``TIME`` written with it (``lead``,
:mod:`flo_redis._wire.lane`), so that what the script publishes leaves before its reply;
which calls are led is declared with the script (``Script(leads=...)`` in the gateway).
A call at a durability level (``wait``) is followed by its ``WAIT`` on the same
connection, in the same write, on whichever way it goes (:mod:`flo_redis._wire.durable`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, TypeAlias

import redis.exceptions as rex
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from flo_redis._wire import functions as _functions
from flo_redis._wire.durable import cluster_pair, pooled_pair, waited
from flo_redis._wire.fallback import EVAL, FCALL, Way, ways
from flo_redis._wire.functions import Functions
from flo_redis._wire.lane import Arg as Arg  # the arguments scripts take (re-exported)
from flo_redis._wire.lane import Check, Lane, bulk, packed_command, packed_head, pooled_call
from flo_redis._wire.library import LIBRARY as LIBRARY
from flo_redis._wire.library import SCRIPTS as SCRIPTS
from flo_redis._wire.lua import LuaScript
from flo_redis._wire.translate import redis_errors as redis_errors
from flo_redis._wire.translate import translated as translated
from flo_redis.durability import Durability
from flo_redis.errors import ServerError
from flo_redis.retry import DEFAULT_RETRY_POLICY, RetryPolicy, is_refused_unrun, retry_refused
from flo_redis.types import Ran

RedisConn: TypeAlias = "Redis | RedisCluster"

log = logging.getLogger("flo_redis.requests")

# A pool of at least this many connections keeps one aside as the lane, and of at least
# _SPARE_MIN a second as the spare lane: the pool keeps two or more for everything else.
_LANE_MIN = 2
_SPARE_MIN = 4

# (script name, by function?) -> the command and the script's name, packed (constant).
_NAMES = {
    (script.name, by_function): bulk(b"FCALL" if by_function else b"EVALSHA")
    + bulk((script.function if by_function else script.sha).encode())
    for script in SCRIPTS.values()
    for by_function in (True, False)
}


class _Call(NamedTuple):
    """One script call as :meth:`ScriptRunner.run` was given it, handed whole to each
    step that sends it (a named tuple: one is made on every call's path)."""

    script: LuaScript
    keys: Sequence[str]
    args: Sequence[Arg]
    head: bytes
    lead: bool
    wait: Durability | None


class ScriptRunner:
    """How one client's scripts are sent on its connection ``conn`` (module docstring).

    Calls refused without running are resent as ``retry`` allows; ``debug`` logs every
    call (and takes no lane); ``max_in_flight`` lets at most that many script calls be
    in flight at once, the others waiting their turn (for a pool that raises at its limit
    instead of waiting: redis-py's cluster pools). ``on_replica`` is called (in the event
    loop, never awaited) each time a call is answered ``READONLY``, after the connections
    that reached the replica were closed. On a plain ``Redis`` scripts are called as
    functions (by SHA under ``FLO_REDIS_SCRIPTS=evalsha``, read when the runner is made),
    and a pool of two connections or more gets a lane, of four or more a spare lane too.
    The settings are the runner's own: no other client's runner sees them."""

    __slots__ = (
        "conn",
        "debug",
        "durability",
        "functions",
        "gate",
        "lane",
        "leading",
        "on_replica",
        "policy",
        "server_version",
        "spare",
    )

    def __init__(
        self,
        conn: RedisConn,
        *,
        retry: RetryPolicy = DEFAULT_RETRY_POLICY,
        debug: bool = False,
        max_in_flight: int = 0,
        on_replica: Callable[[], None] | None = None,
        durability: Durability = Durability.PRIMARY,
        server_version: str = "",
    ) -> None:
        self.conn = conn
        # The level of the client's writes that name none, and the server's version
        # (a level whose command the server lacks is refused before a call is sent).
        self.durability = durability
        self.server_version = server_version
        self.policy = retry
        self.debug = debug
        self.gate = asyncio.Semaphore(max_in_flight) if max_in_flight > 0 else None
        self.on_replica = on_replica
        self.lane: Lane | None = None
        self.spare: Lane | None = None  # taken while ``lane`` is busy (module docstring)
        self.functions: Functions | None = None  # None: scripts go by SHA (a cluster)
        if isinstance(conn, Redis):
            self.functions = Functions(LIBRARY) if _functions.functions_wanted() else None
            size = getattr(conn.connection_pool, "max_connections", 0)
            if size >= _LANE_MIN and not debug:
                self.lane = Lane(conn.connection_pool)
            if size >= _SPARE_MIN and not debug:
                self.spare = Lane(conn.connection_pool)
        # (script name, hash tag) whose next call is led by a TIME: what the gateway's
        # ``leads`` declarations asked for on this client (flo_redis._wire.gateway).
        self.leading: set[tuple[str, str]] = set()

    def release(self) -> None:
        """Stop using the lanes (their connections close with the pool): called before
        the connection is closed. Other runners are not touched."""
        for lane in (self.lane, self.spare):
            if lane is not None:
                lane.release()

    async def run(
        self,
        script: LuaScript,
        keys: Sequence[str],
        args: Sequence[Arg],
        head: bytes = b"",
        lead: bool = False,
        wait: Durability | None = None,
    ) -> Any:
        """Run ``script`` atomically with ``keys`` and ``args``; its raw reply.

        ``head`` is :func:`packed_head` of ``keys`` when the caller keeps it (b"": packed
        here when the call takes the lane); ``lead``: a call that takes the lane is led by
        a ``TIME`` (module docstring); ``wait``: the call is followed by that level's wait
        and the answer is the pair of replies (:mod:`flo_redis._wire.durable`), refused
        first when the server lacks its command. A refusal that says the script did not
        run is resent per the retry policy; the last refusal is raised once it is used
        up. Any other failure is raised as flo's error, and the call is never resent."""
        if wait is not None:
            wait.check_server(self.server_version)
        call = _Call(script, keys, args, head, lead, wait)
        if self.debug:
            return await self._run_logged(call._replace(head=b"", lead=False))
        try:
            return await self._send(call)
        except ServerError as exc:
            if not is_refused_unrun(exc):
                raise
            refused = exc
        return await retry_refused(lambda: self._send(call), self.policy, refused=refused)

    async def _run_logged(self, call: _Call) -> Any:
        name, keys = call.script.name, call.keys

        async def send_logged() -> Any:
            log.debug("-> %s %s", name, keys[0] if keys else "")
            try:
                reply = await self._send(call)
            except Exception as exc:
                log.debug("<- %s %s", name, _failure(exc))
                raise
            log.debug("<- %s %s", name, _reply_summary(reply))
            return reply

        return await retry_refused(send_logged, self.policy)

    async def _send(self, call: _Call) -> Any:
        """One send of the call, each way :func:`ways` gives in turn until one answers."""
        plan = ways(self.functions)
        way = next(plan)
        while True:
            try:
                return await self._call(call, way)
            except rex.RedisError as exc:
                failed = exc
            try:
                way = plan.send(failed)
            except rex.RedisError as exc:
                raise await self._refused(call.script.name, exc) from exc

    async def _call(self, call: _Call, way: Way) -> Any:
        """The call sent one way: ``FCALL`` or ``EVALSHA`` on a lane when one is free,
        else through the pool; ``EVAL`` through the pool; with ``wait``, followed by its
        wait on the same connection. redis-py's errors are raised as they come. An
        ``FCALL`` is written only on a connection whose server was found to hold the
        shipped library (:meth:`Functions.verify`; :class:`LibraryRefused` otherwise)."""
        script, keys, args, head, lead, wait = call
        n = len(keys)
        if way == EVAL:
            if wait is not None:
                return await self._paired(("EVAL", script.source, n, *keys, *args), keys, wait)
            return await self._command("EVAL", script.source, n, *keys, *args)
        by_function = way == FCALL
        functions = self.functions if by_function else None
        check = functions.verify if functions is not None else None
        lane = self.lane
        if lane is not None and lane.busy:
            lane = self.spare
        if lane is not None and not lane.busy and not lane.closed:
            name = _NAMES[script.name, by_function]
            packed = packed_command(name, head or packed_head(keys), n, args)
            if packed is not None:
                return await lane.call(packed, lead, check, None if wait is None else waited(wait))
        command = ("FCALL", script.function) if by_function else ("EVALSHA", script.sha)
        if wait is not None:
            return await self._paired((*command, n, *keys, *args), keys, wait, check)
        if check is not None and isinstance(self.conn, Redis):
            return await pooled_call(self.conn.connection_pool, check, *command, n, *keys, *args)
        return await self._command(*command, n, *keys, *args)

    async def _command(self, *args: Arg) -> Any:
        """``args`` sent through the pool, within the limit on calls in flight."""
        if self.gate is None:
            return await self.conn.execute_command(*args)
        async with self.gate:
            return await self.conn.execute_command(*args)

    async def _paired(
        self,
        command: Sequence[Arg],
        keys: Sequence[str],
        wait: Durability,
        check: Check | None = None,
    ) -> Any:
        """``command`` and the wait of ``wait`` on one connection: of the pool, or of the
        cluster node that owns the keys' slot (within the limit on calls in flight)."""
        conn = self.conn
        if isinstance(conn, Redis):
            return await pooled_pair(conn.connection_pool, command, wait, check)
        if self.gate is None:
            return await cluster_pair(conn, keys[0], command, wait)
        async with self.gate:
            return await cluster_pair(conn, keys[0], command, wait)

    async def _refused(self, what: str, exc: rex.RedisError) -> Exception:
        """The flo error for ``exc``; after a ``READONLY``, first close the connections
        that reach the replica and tell ``on_replica`` (module docstring)."""
        conn = self.conn
        if isinstance(exc, rex.ReadOnlyError) and isinstance(conn, Redis):
            for lane in (self.lane, self.spare):
                if lane is not None:
                    await lane.drop()
            with contextlib.suppress(Exception):  # closing can only fail as the socket did
                await conn.connection_pool.disconnect(inuse_connections=False)
            if self.on_replica is not None:
                self.on_replica()
        return translated(what, exc)


def _failure(exc: Exception) -> str:
    if isinstance(exc, ServerError):
        ran = ", not run" if exc.ran == Ran.NO else ""
        return f"{exc.status_code.name}{ran}: {exc}"
    return f"failed: {exc}"


def _reply_summary(reply: Any) -> str:
    if isinstance(reply, list) and reply and isinstance(reply[0], int):
        return f"status {reply[0]}, {len(reply)} items"
    return type(reply).__name__
