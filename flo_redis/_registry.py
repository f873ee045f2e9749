"""The namespace registries: sorted sets written where things are made, read without
ever scanning the key space (see :mod:`flo_redis.discovery` for what is built on them)."""

from __future__ import annotations

from . import _scripts
from ._scripts import RedisConn
from .codec import decoded
from .keys import namespaces_key

PAGE = 1000  # registry entries read per command


async def remember(
    conn: RedisConn, namespace: str, index: str | None = None, name: str | None = None
) -> None:
    """Record ``namespace`` in the namespace registry and, when given, ``name`` in the
    namespace's registry ``index`` (idempotent; two keys in two slots, so two commands)."""
    with _scripts.redis_errors("registry"):
        if index is not None and name is not None:
            await conn.zadd(index, {name: 0})
        await conn.zadd(namespaces_key(), {namespace: 0})


async def registry_names(conn: RedisConn, key: str) -> tuple[str, ...]:
    names: list[str] = []
    low = "-"
    while True:
        with _scripts.redis_errors("registry"):
            page = await conn.zrange(key, low, "+", bylex=True, offset=0, num=PAGE)
        names += [decoded(n) for n in page]
        if len(page) < PAGE:
            return tuple(names)
        low = f"({names[-1]}"


async def registered_namespaces(conn: RedisConn) -> tuple[str, ...]:
    """Every namespace that has registered an action or worker or made a stream, in name
    order."""
    return await registry_names(conn, namespaces_key())
