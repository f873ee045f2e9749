"""What a server knows of the scripts, and how a client calls them, for tests of the
loading paths (flo_redis/_wire/runner.py, module docstring)."""

from __future__ import annotations

from typing import Any

import redis.asyncio as aioredis

from flo_redis import FloClient
from flo_redis._wire.runner import LIBRARY


async def forget_scripts(raw: aioredis.Redis) -> None:
    """Drop every script and function from the server, as a restart without persistence
    does."""
    await raw.script_flush()
    await raw.function_flush()


async def library_loaded(raw: aioredis.Redis) -> bool:
    return bool(await raw.function_list(library=LIBRARY.name))


async def library_functions(raw: aioredis.Redis) -> set[str]:
    """The names of the functions the server holds in this version's library."""
    [listed] = await raw.function_list(library=LIBRARY.name)
    return {_pairs(f)[b"name"].decode() for f in _pairs(listed)[b"functions"]}


def _pairs(reply: list[Any]) -> dict[bytes, Any]:
    """A flat [name, value, ...] reply as a dict."""
    return dict(zip(reply[::2], reply[1::2], strict=True))


def by_sha(client: FloClient) -> None:
    """Make ``client`` call its scripts by SHA, as one refused ``FCALL`` does (a client
    made under ``FLO_REDIS_SCRIPTS=evalsha`` does already)."""
    functions = client.session.runner.functions
    if functions is not None:
        functions.off("a test calls by SHA")


def calls_functions(client: FloClient) -> bool:
    """Whether ``client`` calls its scripts as Redis Functions (not by SHA: a cluster, a
    refused ``FCALL``, or ``FLO_REDIS_SCRIPTS=evalsha``, which the suite runs under too)."""
    functions = client.session.runner.functions
    return functions is not None and functions.on


def script_command(client: FloClient) -> str:
    """The command ``client`` sends its scripts with."""
    return "FCALL" if calls_functions(client) else "EVALSHA"
