"""A write's trailing wait: how a script call at a durability level other than PRIMARY
(:mod:`flo_redis.durability`) is sent.

``WAIT`` (and ``WAITAOF``) waits for the writes of *the connection it is sent on*, so it
must follow the script on the same connection: it is written with the script, in one
write, and its reply read after the script's (one round trip; the wait's reply may take
up to the level's ``timeout_ms``, so it is read with the connection's timeout extended by
that much). Whatever the script answered, the wait's reply is read too, so the
connection stays in step; a script that was refused (``NOSCRIPT``, a missing function)
is raised as it came, and the wait beside it meant nothing.

On one Redis the pair goes on the lane (:mod:`flo_redis._wire.lane`) or on a connection
of the pool; on a cluster, on a connection of the node that owns the script's hash slot,
as redis-py's routing would have chosen it. A cluster node that answers ``MOVED`` or
``ASK`` did not run the script, and one that cannot be reached may be gone (a failover):
the client's map of slots is read again before the error is raised, so the next call
goes to the slot's owner now.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Sequence
from typing import Any, TypeAlias

import redis.exceptions as rex
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.connection import ConnectionPool

from flo_redis._wire.lane import Arg, Check, bulk
from flo_redis.durability import Durability

# The script's reply, and the wait's: its reply, or the error Redis answered it with.
Pair: TypeAlias = "tuple[Any, Any]"
# The parts of the command that goes first: the script call.
Command: TypeAlias = "Sequence[Arg]"


class Waited:
    """A level's wait as a lane's trail (:class:`flo_redis._wire.lane.Trail`): its
    command packed once, and both replies read by :func:`read_pair`."""

    __slots__ = ("level", "packed")

    def __init__(self, level: Durability) -> None:
        self.level = level
        parts = [str(part).encode() for part in level.command()]
        self.packed = b"*%d\r\n" % len(parts) + b"".join(bulk(part) for part in parts)

    async def read(self, conn: Any) -> Pair:
        return await read_pair(conn, self.level)


@functools.lru_cache(maxsize=64)
def waited(level: Durability) -> Waited:
    """The trail of ``level``, packed once per level (levels are few and frozen)."""
    return Waited(level)


def extra_s(level: Durability) -> float:
    """How much longer than the connection's timeout the wait's reply may take."""
    return level.timeout_ms / 1000.0


async def read_pair(conn: Any, level: Durability) -> Pair:
    """The replies of a script and of the wait written after it on ``conn``."""
    try:
        reply = await conn.read_response()
    except rex.ResponseError:
        await _read_wait(conn, level)  # in step again: the script's refusal is the answer
        raise
    return reply, await _read_wait(conn, level)


async def _read_wait(conn: Any, level: Durability) -> Any:
    timeout = (conn.socket_timeout or 0) + extra_s(level)
    try:
        return await conn.read_response(timeout=timeout)
    except rex.ResponseError as exc:
        return exc


async def sent_pair(conn: Any, command: Command, level: Durability, check: Check | None) -> Pair:
    """``command`` and the wait of ``level`` written on ``conn`` in one write, then
    both replies; ``check`` awaited with the connection first. A failure that is not
    a Redis error reply drops the connection (it is out of step)."""
    try:
        if check is not None:
            await check(conn)
        await conn.send_packed_command(conn.pack_commands([command, level.command()]))
        return await read_pair(conn, level)
    except rex.ResponseError:
        raise
    except BaseException:
        await conn.disconnect(nowait=True)
        raise


async def pooled_pair(
    pool: ConnectionPool, command: Command, level: Durability, check: Check | None
) -> Pair:
    """:func:`sent_pair` on a connection of ``pool``."""
    conn = await pool.get_connection()  # type: ignore[no-untyped-call]
    try:
        return await sent_pair(conn, command, level, check)
    finally:
        await pool.release(conn)


# A cluster node's answers after which the map of slots is read again (module docstring).
MOVED_OR_GONE = (rex.MovedError, rex.AskError, rex.ConnectionError, rex.TimeoutError)


async def cluster_pair(
    cluster: RedisCluster, key: str, command: Command, level: Durability
) -> Pair:
    """:func:`sent_pair` on a connection of the primary that owns ``key``'s slot."""
    node = cluster.get_node_from_key(key)
    if node is None:  # only asked for a replica can it be None
        raise rex.SlotNotCoveredError(f"no node holds the slot of {key!r}")
    conn = node.acquire_connection()
    try:
        return await sent_pair(conn, command, level, None)
    except MOVED_OR_GONE:
        with contextlib.suppress(rex.RedisError, OSError):  # the call's error is the answer
            await cluster.nodes_manager.initialize()
        raise
    finally:
        node.release(conn)


def sync_pair(
    conn: Any, command: Command, level: Durability, check: Callable[[Any], None] | None
) -> Pair:
    """:func:`sent_pair` for redis-py's blocking client."""
    try:
        if check is not None:
            check(conn)
        conn.send_packed_command(conn.pack_commands([command, level.command()]))
        timeout = (conn.socket_timeout or 0) + extra_s(level)
        try:
            reply = conn.read_response()
        except rex.ResponseError:
            _wait_answer(lambda: conn.read_response(timeout=timeout))
            raise
        return reply, _wait_answer(lambda: conn.read_response(timeout=timeout))
    except rex.ResponseError:
        raise
    except BaseException:
        conn.disconnect()
        raise


def _wait_answer(read: Callable[[], Any]) -> Any:
    try:
        return read()
    except rex.ResponseError as exc:
        return exc
