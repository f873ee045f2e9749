"""Redis going away, told once: one warning per cause, one line when it is back.

While Redis is unreachable every poller, reaper, subscription and report of a process
fails, each several times a second. They all report here instead of logging: the first
failure with a given cause (``Connection refused``, ``Connection closed by server``, a
timeout ...) is one WARNING, repeats are DEBUG, and the first success afterwards is one
INFO line saying how long it lasted and how many calls failed. Outages are kept per
Redis address, so a process talking to two servers tells each one's story.

Just after Redis is back, a connection left idle through the outage still fails once
when it is next used ("Connection closed by server"). A failure with one of the ended
outage's causes within :data:`SETTLE_S` of its end is told as part of that outage
(DEBUG), not as a new one: a new cause, or the same one later, opens a new outage.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from flo_redis.errors import NotConnectedError, is_connection_error

# How long after an outage ends a failure with one of its causes is still its tail.
SETTLE_S = 2.0

# Parts of a message that change between two failures of one cause.
_NOISE = re.compile(r"\b\d+(\.\d+)?\s*(ms|s)\b|0x[0-9a-f]+")


@dataclass
class _Outage:
    since: float
    failures: int = 0
    causes: list[str] = field(default_factory=list)


_lock = threading.Lock()
_outages: dict[str, _Outage] = {}
# Outages that ended: when (monotonic seconds) and their causes, for their tail.
_ended: dict[str, tuple[float, list[str]]] = {}


Conn = Redis | RedisCluster
Server = str | Conn | Callable[[], Conn] | None


def address(conn: Conn | Callable[[], Conn] | None) -> str:
    """A short name of the server ``conn`` (or what it returns) talks to: ``host:port``,
    a socket path, the cluster's first startup node, or the service behind Sentinel."""
    if callable(conn) and not isinstance(conn, Redis | RedisCluster):
        try:
            conn = conn()
        except NotConnectedError:
            conn = None
    if conn is None:
        return "redis"
    if isinstance(conn, RedisCluster):
        nodes = conn.nodes_manager.startup_nodes
        return f"cluster {next(iter(nodes), '?')}"
    service = getattr(conn.connection_pool, "service_name", None)
    if service is not None:  # behind Redis Sentinel (its primary changes)
        return f"sentinel service {service}"
    kwargs = conn.connection_pool.connection_kwargs
    if "path" in kwargs:
        return str(kwargs["path"])
    return f"{kwargs.get('host', 'localhost')}:{kwargs.get('port', 6379)}"


def cause_of(exc: BaseException) -> str:
    """What went wrong, without the wrappers' wording: the innermost message."""
    while exc.__cause__ is not None:
        exc = exc.__cause__
    text = str(exc) or type(exc).__name__
    return _NOISE.sub("#", text)


def _is_tail(where: str, cause: str, now: float) -> bool:
    """A failure at ``now`` with ``cause`` is the tail of the outage of ``where`` that
    ended within :data:`SETTLE_S` with that cause among its own."""
    ended = _ended.get(where)
    return ended is not None and now - ended[0] < SETTLE_S and cause in ended[1]


def failed(log: logging.Logger, server: Server, what: str, exc: BaseException) -> None:
    """``what`` (a poll, a reclaim, a subscription ...) failed to reach ``server`` (an
    address, or a connection as :func:`address` takes): a WARNING for a new cause,
    DEBUG for a known one. An error that is not a connection failure is a WARNING."""
    if not is_connection_error(exc):  # not an outage: every time, as it is
        log.warning("%s failed (%s); trying again", what, exc)
        return
    where = server if isinstance(server, str) else address(server)
    cause = cause_of(exc)
    now = time.monotonic()
    with _lock:
        outage = _outages.get(where)
        tail = outage is None and _is_tail(where, cause, now)
        if not tail:
            if outage is None:
                outage = _outages[where] = _Outage(now)
            outage.failures += 1
            new = cause not in outage.causes
            if new:
                outage.causes.append(cause)
    if tail:
        log.debug("%s failed on a connection left from the outage (%s)", what, exc)
    elif new:
        log.warning(
            "Redis at %s unreachable (%s: %s); retrying quietly until it is back",
            where,
            what,
            exc,
        )
    else:
        log.debug("%s failed again (%s)", what, exc)


def reached(log: logging.Logger, server: Server) -> None:
    """A call to ``server`` succeeded: if it was down, say once that it is back."""
    if not _outages:  # the common case: no lock, no address
        return
    where = server if isinstance(server, str) else address(server)
    with _lock:
        outage = _outages.pop(where, None)
        if outage is not None:
            _ended[where] = (time.monotonic(), outage.causes)
    if outage is not None:
        log.info(
            "Redis at %s reachable again after %.1f s (%d failed calls)",
            where,
            time.monotonic() - outage.since,
            outage.failures,
        )


def down(where: str) -> bool:
    """Whether a failure to reach ``where`` was reported and no success since."""
    return where in _outages


__all__ = ["address", "cause_of", "down", "failed", "reached"]
