"""``flo-redis scripts list|load|prune``: the Functions libraries on a Redis.

Each version of flo-redis calls its scripts as functions of a library of its own
(``lua/README.md``, "Functions"); an old version's stays on the server until it is
deleted. Deleting one a process still calls is safe: that process loads it again at its
next call (where its user may; else it calls by SHA). Libraries are the server's, not a
namespace's: loading and pruning them is the admin role's (``flo-redis acl admin``).
This version's library is compared with the one shipped, by its code: a library of its
name holding other code is reported, never taken for it.
"""

from __future__ import annotations

from typing import Any

import click
import redis.exceptions as rex
from redis.asyncio.cluster import RedisCluster

from flo_redis._wire.functions import OTHER, SAME, verdict
from flo_redis._wire.runner import LIBRARY, redis_errors
from flo_redis.cli import _ops as ops
from flo_redis.cli import _tables as tables
from flo_redis.cli._options import url_option
from flo_redis.cli._render import say
from flo_redis.client import FloClient

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
            lib = {
                "library": name,
                "functions": len(fields["functions"]),
                "this_version": name == LIBRARY.name,
            }
            if name == LIBRARY.name:
                lib["shipped"] = await _found(client) == SAME
            out.append(lib)
    return sorted(out, key=lambda lib: (not lib["this_version"], lib["library"]))


async def _found(client: FloClient) -> str:
    """What the server holds under this version's library name, by its code."""
    with redis_errors("FUNCTION LIST"):
        reply = await _redis(client).execute_command(
            "FUNCTION", "LIST", "WITHCODE", "LIBRARYNAME", LIBRARY.name
        )
    return verdict(reply, LIBRARY)


@scripts.command("list")
@url_option
@ops.json_option
@tables.wide_option
def list_libraries(url: str, as_json: bool) -> None:
    """Every flo-redis library on the server; this version's first."""
    found = ops.with_client(url, "default", _libraries, names=None)
    if as_json:
        ops.print_json({"this_version": LIBRARY.name, "libraries": found})
        return
    tables.console().print(
        tables.table(
            f"Function libraries (this version: {LIBRARY.name})",
            ["library", "functions", "this version"],
            [
                (lib["library"], lib["functions"], _this_version(lib.get("shipped")))
                for lib in found
            ],
        )
    )
    if not any(lib["this_version"] for lib in found):
        say(
            f"{LIBRARY.name} is not loaded: the first call loads it where the user may "
            "(or, as an admin: flo-redis scripts load)"
        )
    elif not all(lib.get("shipped", True) for lib in found):
        say(f"{_NOT_SHIPPED}; load the shipped one: flo-redis scripts load --replace")


_NOT_SHIPPED = (
    f"{LIBRARY.name} on the server is not the one this version ships (its code differs): "
    "clients refuse it and call their scripts by SHA"
)


def _this_version(shipped: bool | None) -> str:
    if shipped is None:
        return ""
    return "yes" if shipped else "NOT THE SHIPPED CODE"


@scripts.command("load")
@url_option
@ops.json_option
@click.option(
    "--replace",
    is_flag=True,
    help="Replace a library of this version's name that holds other code.",
)
def load(url: str, as_json: bool, replace: bool) -> None:
    """Load this version's library now, as an admin user (flo-redis acl admin), before
    workers and producers start: their users may call functions but not load them. A
    library of its name holding other code is reported, and replaced with --replace."""

    async def work(client: FloClient) -> str:
        found = await _found(client)
        if found == SAME or (found == OTHER and not replace):
            return found
        with redis_errors("FUNCTION LOAD"):
            await _redis(client).function_load(LIBRARY.source, replace=found == OTHER)
        return "loaded" if found != OTHER else "replaced"

    outcome = ops.with_client(url, "default", work, names=None)
    if outcome == OTHER:
        raise click.ClickException(f"{_NOT_SHIPPED}; replace it: flo-redis scripts load --replace")
    said = {SAME: "was loaded already", "loaded": "loaded", "replaced": "replaced"}
    ops.report(
        as_json,
        f"{LIBRARY.name} {said[outcome]}",
        library=LIBRARY.name,
        loaded=outcome != SAME,
        replaced=outcome == "replaced",
    )


@scripts.command("prune")
@url_option
@ops.json_option
@ops.yes_option
def prune(url: str, as_json: bool, yes: bool) -> None:
    """Delete every flo-redis library but this version's (a process of another version
    loads its own again at its next call)."""
    others = [
        lib["library"]
        for lib in ops.with_client(url, "default", _libraries, names=None)
        if not lib["this_version"]
    ]
    if not others:
        ops.report(as_json, "no other flo-redis library on the server", deleted=[])
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

    ops.with_client(url, "default", work, names=None)
    ops.report(as_json, f"deleted {len(others)}: {', '.join(others)}", deleted=others)
