"""The occurrences a schedule fired, as Redis recorded them: each occurrence is its run's
idempotency key (``schedule:<name>:<ms>``), exact, so a test asserts them, not gaps
measured on a wall clock."""

from __future__ import annotations

import redis.asyncio as aioredis

from flo_redis._wire.keys import action_keys


async def fired_occurrences(
    raw: aioredis.Redis, namespace: str, action: str, name: str | None = None
) -> list[int]:
    """Every occurrence (ms) schedule ``name`` (default: the action's name) of
    ``action`` fired, in order."""
    prefix = f"schedule:{action if name is None else name}:"
    found = await raw.hkeys(action_keys(namespace, action).idempotency)
    keys = [k.decode() for k in found]
    return sorted(int(k.removeprefix(prefix)) for k in keys if k.startswith(prefix))
