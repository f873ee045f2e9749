"""Every public call, with each argument in turn replaced by a wrong type or a bad value:
only flo's error classes come out, and a refused call changes no key (a DUMP of the
namespace's keys before and after must be equal, but for the counters of refused
reports, which count refusals on purpose).

Each call runs against a namespace holding a registered action, a worker, a claimed run,
a held concurrency slot and a stream whose group has a delivered entry; the other
arguments are valid. A bad value that is in fact acceptable (``None`` for an optional
argument, say) may succeed; what may never happen is a raw ``TypeError``,
``AttributeError``, redis-py or msgpack error, or a refusal that wrote something first.
"""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

import pytest
import redis.asyncio as aioredis
from public_calls import BAD, public_calls, valid, valid_call  # noqa: F401
from redis_server import own_server_url

from flo_redis import (
    FloClient,
    FloError,
)

pytestmark = pytest.mark.slow  # every public call with every bad value: minutes

redis_url = own_server_url()  # each call is followed by a scan of the keyspace


async def keyspace(raw: aioredis.Redis, namespace: str) -> dict[bytes, Any]:
    """Every key of the namespace: hashes by field (without the ``stat:`` counters, which
    count refusals on purpose), other keys by DUMP."""
    state: dict[bytes, Any] = {}
    async for key in raw.scan_iter(match=f"*{namespace}*", count=1000):
        if await raw.type(key) == b"hash":
            fields = await raw.hgetall(key)
            state[key] = {f: v for f, v in fields.items() if not f.startswith(b"stat:")}
        else:
            state[key] = await raw.dump(key)
    return state


@pytest.mark.parametrize(("group", "name"), public_calls())
async def test_bad_arguments_are_refused_typed_and_write_nothing(
    client: FloClient,
    raw: aioredis.Redis,
    namespace: str,
    valid: dict[str, Any],  # noqa: F811 - public_calls' fixture
    group: str,
    name: str,
) -> None:
    method, params, base = valid_call(client, group, name, valid)
    raw_errors = []
    for p in params:
        for bad in BAD:
            args = {**base, p.name: bad}
            before = await keyspace(raw, namespace)
            try:
                await asyncio.wait_for(method(**args), 5)
            except FloError:
                after = await keyspace(raw, namespace)
                if after != before:
                    raw_errors.append(f"{p.name}={bad!r}: refused after writing")
            except Exception as exc:
                raw_errors.append(f"{p.name}={bad!r}: {type(exc).__name__}: {exc}")
    assert not raw_errors, f"{group}.{name}: " + "; ".join(raw_errors)


def _constructors(redis_url: str) -> list[tuple[str, Any, dict[str, Any]]]:
    async def handler(ctx: Any) -> None:
        return None

    client = FloClient(redis_url)
    return [
        ("FloClient", FloClient, {"endpoint": redis_url}),
        ("new_action_worker", client.new_action_worker, {}),
        (
            "new_stream_worker",
            client.new_stream_worker,
            {"stream": "s", "group": "g", "handler": handler},
        ),
    ]


def test_bad_settings_are_refused_typed(redis_url: str) -> None:
    raw_errors = []
    for label, make, base in _constructors(redis_url):
        for p in inspect.signature(make).parameters.values():
            if p.name == "handler":
                continue
            for bad in BAD:
                try:
                    make(**{**base, p.name: bad})
                except FloError:
                    pass
                except Exception as exc:
                    raw_errors.append(f"{label}({p.name}={bad!r}): {type(exc).__name__}: {exc}")
    assert not raw_errors, "; ".join(raw_errors)
