"""The only place scripts are sent to Redis (:func:`run`, :func:`run_sync`); the typed
gateway in front of it is :mod:`flo_redis._wire.gateway`.

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
never runs another version's code. Connection failures surface as flo's connection
errors (:func:`redis_errors`).

On Redis Cluster every script's keys share one hash slot (``keys.py``), and redis-py
routes each call by its keys to the primary owning that slot, following ``MOVED`` and
``ASK``; ``NOSCRIPT`` is answered per node, so the ``EVAL`` fallback loads the script on
the node that ran it. A slot in the middle of a migration may answer ``TRYAGAIN`` until
its keys have moved; redis-py retries for a while, then the call is refused as
:class:`UnavailableError` (it did not run, so it is safe to repeat).

Resending is decided here and nowhere else: a call refused *without running* (Redis
``LOADING``, ``TRYAGAIN``, a cluster redirection redis-py gave up following,
``READONLY`` — each raised with ``ran == Ran.NO``) is sent again as the client's
:class:`RetryPolicy` allows (:func:`configure`); a call that may have run (a lost
connection, a timeout, an answer of any kind) is never resent. With ``debug`` each
call and its answer is logged on ``flo_redis.requests`` at DEBUG.

On one Redis (not a cluster) a call made while no other script call is in flight takes
the client's *lane* (:mod:`flo_redis._wire.lane`): a connection of its pool kept aside for
script calls, the command written as bytes packed ahead; a second, the *spare lane*, is
taken while the first is busy, and a call that finds both busy goes through the pool.
Either way the call is the same, with the same fallbacks, error translation and
resending.

A Redis that answers ``READONLY`` was made a replica by a failover while this client
stayed connected to it (a managed Redis moves its primary's address to the replica it
promotes; connections made before stay where they were, and nothing closes them): every
write there is refused, and nothing reconnects by itself. Its scripts refused at their
first write, so nothing ran; the client then closes its idle pooled connections and its
lanes, so the call's resend (and every later call) connects again through the address,
to the primary, and tells the client's ``on_replica`` (:func:`configure`), which moves
its subscriptions too: on a replica they would still hear what the primary publishes,
but the primary counts none of them (liveness, hand-offs).

A call on the lane may be *led* by a ``TIME`` written with it (``lead=True``,
:mod:`flo_redis._wire.lane`), so that what the script publishes leaves before its reply.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

import redis.exceptions as rex
from redis import Redis as SyncRedis
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.cluster import RedisCluster as SyncRedisCluster

from flo_redis._wire import functions as _functions
from flo_redis._wire.denied import denied, is_denied
from flo_redis._wire.functions import BY_SHA, MISSING, Functions, LibraryRefused
from flo_redis._wire.lane import Arg as Arg  # the arguments scripts take (re-exported)
from flo_redis._wire.lane import (
    Lane,
    bulk,
    packed_command,
    packed_head,
    pooled_call,
    pooled_call_sync,
)
from flo_redis._wire.lua import LuaLibrary, LuaScript, library, load_all
from flo_redis.errors import (
    InternalServerError,
    NotConnectedError,
    ProtocolError,
    RequestTimeoutError,
    ServerError,
    UnavailableError,
    ValidationError,
    server_error,
)
from flo_redis.retry import DEFAULT_RETRY_POLICY, RetryPolicy, is_refused_unrun, retry_refused
from flo_redis.types import Ran, Reason, StatusCode

RedisConn: TypeAlias = "Redis | RedisCluster"
SyncConn: TypeAlias = "SyncRedis | SyncRedisCluster"  # flo_redis.sync

LIBRARY: LuaLibrary
SCRIPTS: dict[str, LuaScript]
LIBRARY, SCRIPTS = library(load_all())

log = logging.getLogger("flo_redis.requests")


@dataclass(frozen=True, slots=True)
class _Settings:
    policy: RetryPolicy = DEFAULT_RETRY_POLICY
    debug: bool = False
    gate: asyncio.Semaphore | None = None
    lane: Lane | None = None
    spare: Lane | None = None  # taken while ``lane`` is busy (module docstring)
    on_replica: Callable[[], None] | None = None  # a call was answered READONLY
    functions: Functions | None = None  # None: scripts go by SHA (a cluster)


_DEFAULT = _Settings()

# A pool of at least this many connections keeps one aside as the lane, and of at least
# _SPARE_MIN a second as the spare lane: the pool keeps two or more for everything else.
_LANE_MIN = 2
_SPARE_MIN = 4

# How calls on each connection pool are resent, logged and limited (set by its client).
_SETTINGS: weakref.WeakKeyDictionary[Any, _Settings] = weakref.WeakKeyDictionary()


def configure(
    conn: RedisConn,
    *,
    retry: RetryPolicy = DEFAULT_RETRY_POLICY,
    debug: bool = False,
    max_in_flight: int = 0,
    on_replica: Callable[[], None] | None = None,
) -> None:
    """Resend calls on ``conn`` refused without running as ``retry`` allows, log every
    call when ``debug``, and with ``max_in_flight`` let at most that many script calls
    be in flight at once (the others wait their turn): for a pool that raises at its
    limit instead of waiting (redis-py's cluster pools). ``on_replica`` is called (in
    the event loop, never awaited) each time a call is answered ``READONLY``, after
    the connections that reached the replica were closed (module docstring). A plain
    ``Redis`` calls its scripts as functions (by SHA when ``FLO_REDIS_SCRIPTS=evalsha``:
    :mod:`flo_redis._wire.functions`), and one whose pool holds two connections
    or more gets a lane, and four or more a spare lane too (module docstring);
    :func:`release` ends them. A connection never configured resends by the default
    policy, logs nothing, limits nothing, has no lane and calls by SHA."""
    gate = asyncio.Semaphore(max_in_flight) if max_in_flight > 0 else None
    lane = spare = functions = None
    if isinstance(conn, Redis):
        functions = Functions(LIBRARY) if _functions.functions_wanted() else None
        pool = conn.connection_pool
        size = getattr(pool, "max_connections", 0)
        if size >= _LANE_MIN and not debug:
            lane = Lane(pool)
        if size >= _SPARE_MIN and not debug:
            spare = Lane(pool)
    _SETTINGS[conn] = _Settings(retry, debug, gate, lane, spare, on_replica, functions)


def release(conn: RedisConn) -> None:
    """Forget ``conn``'s settings and stop using its lanes (before closing it)."""
    settings = _SETTINGS.pop(conn, None)
    if settings is None:
        return
    for lane in (settings.lane, settings.spare):
        if lane is not None:
            lane.release()


def _unavailable(message: str) -> ServerError:
    """An UnavailableError for a command that did not run: safe to send again."""
    return server_error(StatusCode.UNAVAILABLE, Reason.UNCLASSIFIED, message, Ran.NO)


@contextlib.contextmanager
def redis_errors(what: str) -> Iterator[None]:
    """Translate redis-py errors into flo's error tree, naming what was being done."""
    try:
        yield
    except rex.NoScriptError:
        raise
    except rex.RedisError as exc:
        raise translated(what, exc) from exc


def translated(what: str, exc: rex.RedisError) -> Exception:
    """The flo error for redis-py's ``exc`` raised while doing ``what`` (see
    :func:`redis_errors`)."""
    if isinstance(exc, rex.TimeoutError):
        return RequestTimeoutError(f"{what}: Redis did not answer in time ({exc})")
    if isinstance(exc, rex.BusyLoadingError):
        return _unavailable(f"{what}: Redis is loading its data set; retry shortly")
    if isinstance(exc, rex.ReadOnlyError):
        # Refused at the script's first write: nothing ran (module docstring).
        return _unavailable(
            f"{what}: Redis answered as a read-only replica (a failover made the server "
            "at this address a replica); connecting again to reach the primary"
        )
    if isinstance(exc, rex.ConnectionError):
        return NotConnectedError(f"{what}: connection to Redis lost ({exc})")
    if isinstance(exc, rex.TryAgainError | rex.ClusterDownError | rex.MovedError | rex.AskError):
        # Redirections redis-py gave up following (a slot in mid-migration, a cluster
        # without a primary for the slot): the command did not run.
        return _unavailable(f"{what}: the Redis Cluster is moving this slot ({exc}); retry")
    if isinstance(exc, rex.ClusterError):
        return UnavailableError(f"{what}: the Redis Cluster did not serve it ({exc})")
    if isinstance(exc, rex.DataError):
        # A value redis-py cannot send: refused before anything reached Redis.
        return ValidationError(f"{what}: {exc}")
    if isinstance(exc, rex.ResponseError):
        if is_denied(exc):
            return denied(what, exc, SCRIPTS, LIBRARY)
        return InternalServerError(f"{what}: Redis refused the command: {exc}")
    # What answered is not speaking Redis's protocol (an HTTP server at the URL, a TLS
    # port spoken to in plain text ...), or redis-py refused a value.
    return ProtocolError(f"{what}: unexpected answer from the server ({exc})")


async def run(
    conn: RedisConn,
    script: LuaScript,
    keys: Sequence[str],
    args: Sequence[Arg],
    head: bytes = b"",
    lead: bool = False,
) -> Any:
    """Run ``script`` atomically with ``keys`` and ``args``; return its raw reply.

    With :func:`run_sync`, the one place a script is sent: the typed gateway
    (:mod:`flo_redis._wire.gateway`) builds the call, this sends it. ``head`` is
    :func:`packed_head` of ``script`` and ``keys`` when the caller keeps it (b"": packed
    here when the call takes the lane); ``lead``: a call that takes the lane is led by a
    ``TIME`` (module docstring). A refusal that says the script did not run is
    resent per the connection's retry policy (:func:`configure`); the last refusal is
    raised once the policy is used up."""
    settings = _SETTINGS.get(conn, _DEFAULT)
    if settings.debug:
        return await _run_logged(conn, settings, script, keys, args)
    try:
        return await _send(conn, settings, script, keys, args, head, lead)
    except ServerError as exc:
        if not is_refused_unrun(exc):
            raise
        refused = exc
    return await retry_refused(
        lambda: _send(conn, settings, script, keys, args, head, lead),
        settings.policy,
        refused=refused,
    )


async def _run_logged(
    conn: RedisConn,
    settings: _Settings,
    script: LuaScript,
    keys: Sequence[str],
    args: Sequence[Arg],
) -> Any:
    name = script.name

    async def send_logged() -> Any:
        log.debug("-> %s %s", name, keys[0] if keys else "")
        try:
            reply = await _send(conn, settings, script, keys, args, b"")
        except Exception as exc:
            log.debug("<- %s %s", name, _failure(exc))
            raise
        log.debug("<- %s %s", name, _reply_summary(reply))
        return reply

    return await retry_refused(send_logged, settings.policy)


def run_sync(conn: SyncConn, script: LuaScript, keys: Sequence[str], args: Sequence[Arg]) -> Any:
    """:func:`run` for redis-py's blocking client (``flo_redis.sync``). A call answered
    ``READONLY`` did not run: the pool's idle connections are closed and it is sent once
    more, connecting again, to the primary (module docstring)."""
    with redis_errors(script.name):
        try:
            return _send_sync(conn, script, keys, args)
        except rex.ReadOnlyError:
            if isinstance(conn, SyncRedis):
                with contextlib.suppress(Exception):  # it can only fail as the socket did
                    conn.connection_pool.disconnect(inuse_connections=False)
        return _send_sync(conn, script, keys, args)


# The blocking clients' function state (:class:`Functions`), made at their first call.
_SYNC_FUNCTIONS: weakref.WeakKeyDictionary[SyncRedis, Functions] = weakref.WeakKeyDictionary()
_SYNC_MADE = threading.Lock()


def _send_sync(conn: SyncConn, script: LuaScript, keys: Sequence[str], args: Sequence[Arg]) -> Any:
    functions = None
    if isinstance(conn, SyncRedis):
        functions = _SYNC_FUNCTIONS.get(conn)
        if functions is None:
            wanted = _functions.functions_wanted()
            with _SYNC_MADE:
                functions = _SYNC_FUNCTIONS.setdefault(conn, Functions(LIBRARY, on=wanted))
    for attempt in (1, 2) if functions is not None and functions.on else ():
        assert functions is not None and isinstance(conn, SyncRedis)
        command = ("FCALL", script.function, len(keys), *keys, *args)
        try:
            return pooled_call_sync(conn.connection_pool, functions.verify_sync, *command)
        except LibraryRefused:
            break
        except rex.ResponseError as exc:
            refusal = _functions.refusal(exc, attempt)
            if refusal is None:
                raise
            if refusal == BY_SHA:
                functions.off(f"FCALL was refused ({exc})")
            if refusal != MISSING:
                break
            functions.forget()
    try:
        return conn.evalsha(script.sha, len(keys), *keys, *args)
    except rex.NoScriptError:
        return conn.eval(script.source, len(keys), *keys, *args)


# (script name, by function?) -> the command and the script's name, packed.
_NAMES = {
    (script.name, by_function): bulk(b"FCALL" if by_function else b"EVALSHA")
    + bulk((script.function if by_function else script.sha).encode())
    for script in SCRIPTS.values()
    for by_function in (True, False)
}


async def _send(
    conn: RedisConn,
    settings: _Settings,
    script: LuaScript,
    keys: Sequence[str],
    args: Sequence[Arg],
    head: bytes,
    lead: bool = False,
) -> Any:
    functions = settings.functions
    for attempt in (1, 2) if functions is not None and functions.on else ():
        assert functions is not None
        try:
            return await _call(conn, settings, script, True, keys, args, head, lead)
        except LibraryRefused:
            break  # nothing was written: by SHA
        except rex.ResponseError as exc:
            refusal = _functions.refusal(exc, attempt)
            if refusal is None:
                raise await _refused(conn, settings, script.name, exc) from exc
            if refusal == BY_SHA:
                functions.off(f"FCALL was refused ({exc})")
            if refusal != MISSING:
                break
            functions.forget()  # gone since it was checked: checked (loaded) again
        except rex.RedisError as exc:
            raise await _refused(conn, settings, script.name, exc) from exc
    try:
        return await _call(conn, settings, script, False, keys, args, head, lead)
    except rex.NoScriptError:
        pass
    except rex.RedisError as exc:
        raise await _refused(conn, settings, script.name, exc) from exc
    # Not known there (a restart, SCRIPT FLUSH, a new node): send the source, which
    # also loads it.
    try:
        return await _command(conn, settings, "EVAL", script.source, len(keys), *keys, *args)
    except rex.RedisError as exc:
        raise await _refused(conn, settings, script.name, exc) from exc


async def _call(
    conn: RedisConn,
    settings: _Settings,
    script: LuaScript,
    by_function: bool,
    keys: Sequence[str],
    args: Sequence[Arg],
    head: bytes,
    lead: bool,
) -> Any:
    """One ``FCALL`` (``by_function``) or ``EVALSHA`` of ``script``, on a lane when one
    is free; redis-py's errors are raised as they come. An ``FCALL`` is written only on
    a connection whose server was found to hold the shipped library
    (:meth:`Functions.verify`; :class:`LibraryRefused` otherwise)."""
    functions = settings.functions if by_function else None
    check = functions.verify if functions is not None else None
    lane = settings.lane
    if lane is not None and lane.busy:
        lane = settings.spare
    if lane is not None and not lane.busy and not lane.closed:
        name = _NAMES[script.name, by_function]
        packed = packed_command(name, head or packed_head(keys), len(keys), args)
        if packed is not None:
            return await lane.call(packed, lead, check)
    command = ("FCALL", script.function) if by_function else ("EVALSHA", script.sha)
    if check is not None and isinstance(conn, Redis):
        return await pooled_call(conn.connection_pool, check, *command, len(keys), *keys, *args)
    return await _command(conn, settings, *command, len(keys), *keys, *args)


async def _command(conn: RedisConn, settings: _Settings, *args: Arg) -> Any:
    """``args`` sent through the pool, within the connection's limit on calls in flight
    (:func:`configure`, ``max_in_flight``)."""
    if settings.gate is None:
        return await conn.execute_command(*args)
    async with settings.gate:
        return await conn.execute_command(*args)


async def _refused(
    conn: RedisConn, settings: _Settings, what: str, exc: rex.RedisError
) -> Exception:
    """The flo error for ``exc``; after a ``READONLY``, first close the connections that
    reach the replica and tell ``on_replica`` (module docstring)."""
    if isinstance(exc, rex.ReadOnlyError) and isinstance(conn, Redis):
        for lane in (settings.lane, settings.spare):
            if lane is not None:
                await lane.drop()
        with contextlib.suppress(Exception):  # closing can only fail as the socket did
            await conn.connection_pool.disconnect(inuse_connections=False)
        if settings.on_replica is not None:
            settings.on_replica()
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
