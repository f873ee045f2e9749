"""The namespace registries: sorted sets written where things are made, read without
ever scanning the key space (see :mod:`flo_redis.ops.discovery` for what is built on them).

A namespace's own registries (its actions, streams; ``keys.namespace_keys``) are its
keys, reached by every role over the namespace. The registry of namespaces
(``keys.namespaces_key``) belongs to none: a user narrowed to one namespace is refused
it (it would tell the other namespaces' names), so a client records its namespace there
once, and a refusal is taken as the answer (logged at DEBUG, not asked again). Listing
namespaces is a server-wide role's read."""

from __future__ import annotations

import logging
import weakref

from flo_redis._wire import runner
from flo_redis._wire.codec import decoded
from flo_redis._wire.keys import namespaces_key
from flo_redis._wire.runner import RedisConn
from flo_redis.errors import PermissionDeniedError

PAGE = 1000  # registry entries read per command

log = logging.getLogger("flo_redis.requests")

# connection -> the namespaces recorded (or refused) in the registry of namespaces
_LISTED: weakref.WeakKeyDictionary[RedisConn, set[str]] = weakref.WeakKeyDictionary()


async def remember(
    conn: RedisConn, namespace: str, index: str | None = None, name: str | None = None
) -> None:
    """Record ``name`` in the namespace's registry ``index`` (when given), then
    ``namespace`` in the registry of namespaces, once per client and where the user may
    (module docstring). Idempotent; two keys in two slots, so two commands."""
    with runner.redis_errors("registry"):
        if index is not None and name is not None:
            await conn.zadd(index, {name: 0})
    listed = _LISTED.setdefault(conn, set())
    if namespace in listed:
        return
    try:
        with runner.redis_errors("registry of namespaces"):
            await conn.zadd(namespaces_key(), {namespace: 0})
    except PermissionDeniedError as exc:
        log.debug("namespace %r not listed in %s: %s", namespace, namespaces_key(), exc)
    listed.add(namespace)


async def registry_names(conn: RedisConn, key: str) -> tuple[str, ...]:
    names: list[str] = []
    low = "-"
    while True:
        with runner.redis_errors("registry"):
            page = await conn.zrange(key, low, "+", bylex=True, offset=0, num=PAGE)
        names += [decoded(n) for n in page]
        if len(page) < PAGE:
            return tuple(names)
        low = f"({names[-1]}"


async def registered_namespaces(conn: RedisConn) -> tuple[str, ...]:
    """Every namespace that has registered an action or worker or made a stream, in name
    order (a server-wide read: a user narrowed to a namespace is refused it)."""
    return await registry_names(conn, namespaces_key())


__all__ = ["registered_namespaces", "registry_names", "remember"]
