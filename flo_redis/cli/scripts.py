"""``flo-redis scripts list|load|prune``: the Functions libraries on a Redis.

Each version of flo-redis calls its scripts as functions of a library of its own
(``lua/README.md``, "Functions"); an old version's stays on the server until it is
deleted. Deleting one a process still calls is safe: that process loads it again at its
next call. Libraries are the server's, not a namespace's.
"""

from __future__ import annotations

from typing import Any

import click
import redis.exceptions as rex
from redis.asyncio.cluster import RedisCluster

from .._scripts import LIBRARY, redis_errors
from ..client import FloClient
from . import _ops as ops
from ._options import url_option
from ._render import say

PREFIX = "flo_"


def register(group: click.Group) -> None:
    group.add_command(scripts)


@click.group("scripts")
def scripts() -> None:
    """See, load and prune the Redis Functions libraries of flo-redis versions."""


def _redis(client: FloClient) -> Any:
    if isinstance(client.redis, RedisCluster):
        raise click.ClickException(
            "on Redis Cluster flo-redis calls its scripts by SHA: there is no library"
        )
    return client.redis


def _pairs(reply: list[Any]) -> dict[str, Any]:
    """A flat [name, value, ...] reply (RESP2) as a dict; a map (RESP3) as it is."""
    if isinstance(reply, dict):
        return {_text(k): v for k, v in reply.items()}
    return {_text(k): v for k, v in zip(reply[::2], reply[1::2], strict=True)}


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


async def _libraries(client: FloClient) -> list[dict[str, Any]]:
    with redis_errors("FUNCTION LIST"):
        listed = await _redis(client).function_list(library=f"{PREFIX}*")
    out = []
    for entry in listed:
        fields = _pairs(entry)
        name = _text(fields["library_name"])
        if name.startswith(PREFIX):
            out.append(
                {
                    "library": name,
                    "functions": len(fields["functions"]),
                    "this_version": name == LIBRARY.name,
                }
            )
    return sorted(out, key=lambda lib: (not lib["this_version"], lib["library"]))


@scripts.command("list")
@url_option
@ops.json_option
def list_libraries(url: str, as_json: bool) -> None:
    """Every flo-redis library on the server; this version's first."""
    found = ops.with_client(url, "default", _libraries)
    if as_json:
        ops.print_json({"this_version": LIBRARY.name, "libraries": found})
        return
    ops.console().print(
        ops.table(
            f"Function libraries (this version: {LIBRARY.name})",
            ["library", "functions", "this version"],
            [
                (lib["library"], lib["functions"], "yes" if lib["this_version"] else "")
                for lib in found
            ],
        )
    )
    if not any(lib["this_version"] for lib in found):
        say(f"{LIBRARY.name} is not loaded: the first call loads it (or: flo-redis scripts load)")


@scripts.command("load")
@url_option
def load(url: str) -> None:
    """Load this version's library now (a first call would), e.g. as an admin user
    before workers whose user may call functions but not load them start."""

    async def work(client: FloClient) -> bool:
        conn = _redis(client)
        with redis_errors("FUNCTION LOAD"):
            if await conn.function_list(library=LIBRARY.name):
                return False
            await conn.function_load(LIBRARY.source)
        return True

    loaded = ops.with_client(url, "default", work)
    say(f"{LIBRARY.name} {'loaded' if loaded else 'was loaded already'}")


@scripts.command("prune")
@url_option
@ops.yes_option
def prune(url: str, yes: bool) -> None:
    """Delete every flo-redis library but this version's (a process of another version
    loads its own again at its next call)."""
    others = [
        lib["library"]
        for lib in ops.with_client(url, "default", _libraries)
        if not lib["this_version"]
    ]
    if not others:
        say("no other flo-redis library on the server")
        return
    ops.confirm(
        yes,
        f"Delete {len(others)} librar{'y' if len(others) == 1 else 'ies'}: {', '.join(others)}?",
    )

    async def work(client: FloClient) -> None:
        conn = _redis(client)
        for name in others:
            with redis_errors(f"FUNCTION DELETE {name}"):
                try:
                    await conn.function_delete(name)
                except rex.ResponseError as exc:
                    if "not found" not in str(exc).lower():  # deleted meanwhile: done
                        raise

    ops.with_client(url, "default", work)
    say(f"deleted {len(others)}: {', '.join(others)}")
