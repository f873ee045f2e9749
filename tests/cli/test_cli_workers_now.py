"""``flo-redis workers list`` and ``workers show`` through the real command: what each
worker is doing now (the runs it holds, for how long), its load, version and process."""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Callable

from cli_command import Command

from flo_redis import FloClient, WorkerAwaitOptions, WorkerRegisterOptions
from flo_redis.actions.worker_registry import flo_redis_version

NOW = WorkerAwaitOptions(block_ms=0)


async def _busy_worker(client: FloClient, runs: int) -> list[str]:
    """w1 serving 'job' at concurrency 8 and holding ``runs`` runs; w2 idle."""
    await client.action.register("job")
    await client.worker.register("w1", ["job"], WorkerRegisterOptions(concurrency=8))
    await client.worker.register("w2", ["job"], WorkerRegisterOptions(concurrency=4))
    for _ in range(runs):
        await client.action.invoke("job", b"x")
    claimed = await client.worker.await_tasks("w1", ["job"], runs, NOW)
    return [c.run_id for c in claimed]


def _output(cmd: Command) -> str:
    assert cmd.exits(0)
    return cmd.output()


async def test_workers_list_json_names_the_runs_each_worker_holds(
    client: FloClient, namespace: str, redis_url: str, command: Callable[..., Command]
) -> None:
    held = await _busy_worker(client, 3)

    cmd = command("workers", "list", "--json", "--url", redis_url, "--namespace", namespace)
    found = {w["worker_id"]: w for w in json.loads(_output(cmd))}

    w1, w2 = found["w1"], found["w2"]
    assert (w1["runs_held"], w1["runs_held_complete"]) == (3, True)
    assert sorted(r["run_id"] for r in w1["runs"]) == sorted(held)
    assert all(r["action"] == "job" and r["attempt"] == 1 for r in w1["runs"])
    assert (w2["runs_held"], w2["runs"]) == (0, [])
    assert (w1["version"], w1["host"], w1["pid"]) == (
        flo_redis_version(),
        socket.gethostname(),
        os.getpid(),
    )


async def test_workers_list_shows_load_as_runs_held_of_concurrency(
    client: FloClient, namespace: str, redis_url: str, command: Callable[..., Command]
) -> None:
    await _busy_worker(client, 2)

    cmd = command("workers", "list", "--wide", "--url", redis_url, "--namespace", namespace)
    out = _output(cmd)

    assert "2/8" in out and "0/4" in out
    assert flo_redis_version() in out
    assert f"{socket.gethostname()}:{os.getpid()}" in out


async def test_workers_show_lists_held_runs_and_how_many_more(
    client: FloClient, namespace: str, redis_url: str, command: Callable[..., Command]
) -> None:
    held = await _busy_worker(client, 5)

    args = ("--url", redis_url, "--namespace", namespace)
    out = _output(command("workers", "show", "w1", "--limit", "2", *args))

    assert "5/8 runs held" in out
    assert sum(run_id in out for run_id in held) == 2
    assert "and 3 more" in out
    assert flo_redis_version() in out
    shown = json.loads(_output(command("workers", "show", "w1", "--json", *args)))
    assert shown["runs_held"] == 5 and len(shown["runs"]) == 5


async def test_workers_show_refuses_a_worker_that_is_not_registered(
    client: FloClient, namespace: str, redis_url: str, command: Callable[..., Command]
) -> None:
    await _busy_worker(client, 1)

    cmd = command("workers", "show", "w9", "--url", redis_url, "--namespace", namespace)

    assert cmd.exits(1)
    assert "w9" in cmd.output() and "w1" in cmd.output()
