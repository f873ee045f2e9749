"""``flo-redis scripts``: the Functions libraries of flo-redis versions on a Redis, listed,
loaded ahead of the first call, and pruned down to this version's."""

from __future__ import annotations

import json
from typing import Any

import redis
from click.testing import CliRunner, Result
from redis_server import RedisServer

from flo_redis._wire.runner import LIBRARY, SCRIPTS
from flo_redis.cli import main

OLD = "flo_000000000000"  # a library as an older version would have left it
OLD_SOURCE = f"#!lua name={OLD}\nredis.register_function('{OLD}_x', function() return 1 end)\n"


def cli(url: str, *args: str, input: str | None = None) -> Result:
    return CliRunner().invoke(main, [*args, "--url", url], input=input, catch_exceptions=False)


def listed(url: str) -> dict[str, Any]:
    result = cli(url, "scripts", "list", "--json")
    assert result.exit_code == 0, result.output
    data: dict[str, Any] = json.loads(result.output)
    return data


def test_load_then_list_shows_this_versions_library(server: RedisServer) -> None:
    with redis.Redis.from_url(server.url) as conn:
        conn.function_flush()
    empty = listed(server.url)
    assert empty == {"this_version": LIBRARY.name, "libraries": []}
    assert "is not loaded" in cli(server.url, "scripts", "list").output

    first = cli(server.url, "scripts", "load")
    assert first.exit_code == 0 and f"{LIBRARY.name} loaded" in first.output
    again = cli(server.url, "scripts", "load")
    assert "was loaded already" in again.output
    [library] = listed(server.url)["libraries"]
    assert library == {
        "library": LIBRARY.name,
        "functions": len(SCRIPTS),
        "this_version": True,
        "shipped": True,
    }


def test_a_library_of_this_versions_name_with_other_code_is_reported_then_replaced(
    server: RedisServer,
) -> None:
    tampered = LIBRARY.source + "\n-- one line more\n"
    with redis.Redis.from_url(server.url) as conn:
        conn.function_flush()
        conn.function_load(tampered)
    [library] = listed(server.url)["libraries"]
    assert library["this_version"] and library["shipped"] is False
    assert "NOT THE SHIPPED CODE" in cli(server.url, "scripts", "list").output

    refused = cli(server.url, "scripts", "load")
    assert refused.exit_code == 1 and "its code differs" in refused.output
    replaced = cli(server.url, "scripts", "load", "--replace")
    assert replaced.exit_code == 0 and f"{LIBRARY.name} replaced" in replaced.output
    assert listed(server.url)["libraries"][0]["shipped"] is True


def test_prune_deletes_other_versions_libraries_after_asking(server: RedisServer) -> None:
    with redis.Redis.from_url(server.url) as conn:
        conn.function_flush()
        conn.function_load(OLD_SOURCE)
        conn.function_load(LIBRARY.source)
    assert [lib["library"] for lib in listed(server.url)["libraries"]] == [LIBRARY.name, OLD]

    refused = cli(server.url, "scripts", "prune", input="n\n")
    assert refused.exit_code == 1
    assert len(listed(server.url)["libraries"]) == 2

    pruned = cli(server.url, "scripts", "prune", "--yes")
    assert pruned.exit_code == 0 and f"deleted 1: {OLD}" in pruned.output
    assert [lib["library"] for lib in listed(server.url)["libraries"]] == [LIBRARY.name]
    assert "no other flo-redis library" in cli(server.url, "scripts", "prune", "--yes").output


def test_on_a_cluster_there_is_no_library(cluster_url: str) -> None:
    result = CliRunner().invoke(main, ["scripts", "list", "--url", cluster_url])
    assert result.exit_code == 1
    assert "by SHA" in result.output
