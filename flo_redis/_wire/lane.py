"""A script call's *lane*: on one Redis (not a cluster), a call made while no other
script call is in flight takes one connection of the client's pool kept aside for script
calls, on which the ``FCALL`` (or ``EVALSHA``) is written as bytes packed ahead
(:func:`packed_command`; the script's KEYS packed once per key object by the gateway,
:func:`packed_head`) and its reply read straight back, without redis-py's per-command
machinery (pool checkout, health check, a task per write). A call made while the lane is
busy takes the *spare lane*, a second such connection (kept when the pool holds four
connections or more), so that two streams of calls that overlap -- a worker's reads and
its acks or completes, each one call at a time -- both go the short way; a call that finds
both busy goes through the pool. :mod:`flo_redis._wire.runner` decides which call takes a
lane, with the same fallbacks, error translation and resending either way: calls in
flight at once were never ordered among themselves, whichever connections carry them. A
lane reconnects on its next call after any failure (a connection the server closed while
idle is made again first, as the pool would).

A call on the lane may be *led* by a ``TIME`` written with it (``lead=True``; the
cheapest command every documented ACL user may send): Redis writes the replies of one
event-loop turn to the clients most recently given one first, so a client it already
owes a reply (the ``TIME``) is written to after anyone the script then publishes to.
Which calls are led is declared with their script (``leads=`` in
:mod:`flo_redis._wire.gateway`): an invoke after one that handed its run to a parked
poller is led this way, so the poller's hand-off message leaves before the invoke's own
reply, as a ``BLMOVE`` consumer is answered before the ``LPUSH`` that served it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol, TypeAlias

import redis.exceptions as rex
from redis.asyncio.connection import AbstractConnection, ConnectionPool
from redis.connection import ConnectionPool as SyncPool

Arg: TypeAlias = "str | bytes | int"
# Awaited with a connection before a call is written on it (Lane.call, pooled_call).
Check: TypeAlias = Callable[[Any], Awaitable[None]]


class Trail(Protocol):
    """A command written after a call in the same write, and how both replies are read
    (:class:`flo_redis._wire.durable.Waited`)."""

    @property
    def packed(self) -> bytes: ...

    async def read(self, conn: Any) -> Any: ...


def closed_by_server(conn: Any) -> bool:
    """Whether redis-py connection ``conn`` is open on this side but the server closed
    it (while it sat idle): its next command would fail unwritten, so make it again."""
    reader = conn._reader
    return reader is not None and bool(reader.at_eof())


class Lane:
    """One connection of a pool kept aside for script calls one at a time (module
    docstring). ``busy`` while a call is on it; a call that finds it busy uses the pool."""

    __slots__ = ("_conn", "_pool", "busy", "closed")

    def __init__(self, pool: ConnectionPool) -> None:
        self._pool = pool
        self._conn: AbstractConnection | None = None
        self.busy = False
        self.closed = False

    async def call(
        self,
        packed: bytes,
        lead: bool = False,
        check: Check | None = None,
        trail: Trail | None = None,
    ) -> Any:
        """Send one packed command and answer its reply (a Redis error reply raised as
        redis-py raises it); with ``lead``, a ``TIME`` goes ahead of it in the same write
        (module docstring); ``check`` is awaited with the connection first (it may send
        commands of its own, and refuse the call by raising a Redis error reply). With
        ``trail``, its packed command follows in the same write and the answer is both
        replies, read by ``trail.read`` (:mod:`flo_redis._wire.durable`). Any other
        failure, cancellation included, drops the connection, to be made again by the
        next call."""
        self.busy = True
        try:
            conn = self._conn
            if conn is None:
                conn = self._conn = await self._pool.get_connection()  # type: ignore[no-untyped-call]
            writer = conn._writer
            if writer is None or writer.is_closing() or closed_by_server(conn):
                await conn.disconnect()
                await conn.connect()
                writer = conn._writer
            try:
                if check is not None:
                    await check(conn)
                if trail is not None:
                    packed += trail.packed
                writer.write(_LEAD + packed if lead else packed)  # type: ignore[union-attr]
                if writer.transport.get_write_buffer_size():  # type: ignore[union-attr]
                    await asyncio.wait_for(writer.drain(), conn.socket_timeout)  # type: ignore[union-attr]
                if lead:
                    # Its answer says nothing the call's own does not (a refusal such
                    # as LOADING refuses the call too): read past it, even an error.
                    with contextlib.suppress(rex.ResponseError):
                        await conn.read_response()
                if trail is not None:
                    return await trail.read(conn)
                return await conn.read_response()
            except rex.ResponseError:
                raise  # an answer: the connection is in step
            except BaseException:
                await conn.disconnect(nowait=True)
                raise
        finally:
            self.busy = False

    def release(self) -> None:
        """Stop using the lane (its connection is closed with its pool)."""
        self.closed = True

    async def drop(self) -> None:
        """Close the lane's connection unless a call is on it (that call answers for
        itself): the next call connects again."""
        conn = self._conn
        if conn is not None and not self.busy:
            await conn.disconnect(nowait=True)


async def pooled_call(pool: ConnectionPool, check: Check, *args: Arg) -> Any:
    """``args`` sent as one command on a connection of ``pool``, once ``check`` returned
    for that connection (:meth:`Lane.call`); the reply as redis-py reads it. A failure
    that is not a Redis error reply drops the connection, as redis-py does."""
    conn = await pool.get_connection()  # type: ignore[no-untyped-call]
    try:
        await check(conn)
        await conn.send_command(*args)
        return await conn.read_response()
    except rex.ResponseError:
        raise
    except BaseException:
        await conn.disconnect(nowait=True)
        raise
    finally:
        await pool.release(conn)


def pooled_call_sync(pool: SyncPool, check: Callable[[Any], None], *args: Arg) -> Any:
    """:func:`pooled_call` for redis-py's blocking client."""
    conn = pool.get_connection()
    try:
        check(conn)
        conn.send_command(*args)  # type: ignore[no-untyped-call]
        return conn.read_response()
    except rex.ResponseError:
        raise
    except BaseException:
        conn.disconnect()  # type: ignore[no-untyped-call]
        raise
    finally:
        pool.release(conn)


def packed_head(keys: Sequence[str]) -> bytes:
    """The part of a script call that stays the same from call to call with ``keys``, in
    Redis's protocol: the KEYS count and the KEYS."""
    return b"".join(bulk(x.encode()) for x in (str(len(keys)), *keys))


_LEAD = b"*1\r\n$4\r\nTIME\r\n"  # a call's lead (module docstring)


def bulk(data: bytes) -> bytes:
    return b"$%d\r\n%s\r\n" % (len(data), data)


def packed_command(name: bytes, head: bytes, nkeys: int, args: Sequence[Arg]) -> bytes | None:
    """The whole command: ``name`` (the command and the script's name, packed by the caller),
    ``head`` (:func:`packed_head`), then ``args``; None when an argument is not bytes,
    str or int (the pool's path sends it, or refuses it as redis-py does)."""
    count = nkeys + len(args) + 3
    parts = [_COUNT[count] if count < len(_COUNT) else b"*%d\r\n" % count, name, head]
    append = parts.append
    for arg in args:
        # (No typing.cast here: it is a Python call of its own, per argument.)
        kind = type(arg)
        data: bytes
        if kind is bytes:
            data = arg  # type: ignore[assignment]
        elif kind is str:
            data = arg.encode()  # type: ignore[union-attr]
        elif kind is int:
            data = str(arg).encode()
        else:
            return None
        size = len(data)
        append(_BULK[size] if size < _PREFIXED else b"$%d\r\n" % size)
        append(data)
        append(b"\r\n")
    return b"".join(parts)


# "$<n>\r\n" (a bulk string of n bytes follows) and "*<n>\r\n" (a command of n parts),
# made once for the sizes most calls have: %-formatting bytes costs more than the rest of
# an argument's packing.
_PREFIXED = 512
_BULK = tuple(b"$%d\r\n" % n for n in range(_PREFIXED))
_COUNT = tuple(b"*%d\r\n" % n for n in range(64))
