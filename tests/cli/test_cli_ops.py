"""The operator commands through the real ``flo-redis`` entry point: tables for people,
``--json`` for scripts, confirmation before destructive steps."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

from cli_runner import cli, with_client
from click.testing import Result

from flo_redis import (
    FloClient,
    RunStatus,
    WorkerAwaitOptions,
)

FLO_REDIS = str(Path(sys.executable).with_name("flo-redis"))


def as_json(result: Result) -> Any:
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_status_shows_every_action_worker_and_group(
    redis_url: str, namespace: str, world: dict[str, Any]
) -> None:
    data = as_json(cli(redis_url, namespace, "status", "--json"))
    [job] = data["actions"]
    assert {k: job[k] for k in ("action", "pending", "delayed", "running", "completed")} == {
        "action": "job", "pending": 3, "delayed": 2, "running": 1, "completed": 3,
    }  # fmt: skip
    assert (job["failed"], job["timed_out"], sum(job["completed_per_minute"])) == (2, 1, 3)
    assert [w["worker_id"] for w in data["workers"]] == ["w1"]
    [group] = data["groups"]
    assert group == {
        "stream": "events", "group": "billing", "partitions": 1, "consumers": 1,
        "pending": 1, "lag": 2, "dead_letters": 1, "quarantined": 0,
    }  # fmt: skip
    table = cli(redis_url, namespace, "status")
    assert table.exit_code == 0, table.output
    for text in ("Actions in", "job", "Workers", "w1", "Stream groups", "billing"):
        assert text in table.output


def test_status_watch_refreshes_until_its_count(
    redis_url: str, namespace: str, world: dict[str, Any]
) -> None:
    result = cli(redis_url, namespace, "status", "--watch", "-n", "2", "--interval", "0.1")
    assert result.exit_code == 0, result.output
    assert "job" in result.output


def test_runs_list_and_show(redis_url: str, namespace: str, world: dict[str, Any]) -> None:
    failed = as_json(
        cli(redis_url, namespace, "runs", "list", "job", "--state", "failed", "--json")
    )
    assert {r["run_id"]: r["status"] for r in failed["runs"]} == {
        world["expired"]: "TIMED_OUT",
        **{run_id: "FAILED" for run_id in world["failed"]},
    }
    table = cli(redis_url, namespace, "runs", "list", "job", "--state", "failed")
    assert "boom" in table.output and world["expired"] in table.output
    paged = as_json(cli(redis_url, namespace, "runs", "list", "job", "--limit", "2", "--json"))
    assert [r["run_id"] for r in paged["runs"]] == world["waiting"][:2]
    rest = as_json(
        cli(redis_url, namespace, "runs", "list", "job", "--cursor", paged["cursor"], "--json")
    )
    assert [r["run_id"] for r in rest["runs"]] == world["waiting"][2:]
    delayed = as_json(
        cli(redis_url, namespace, "runs", "list", "job", "--state", "delayed", "--json")
    )
    assert all(r["due_at_ms"] for r in delayed["runs"])
    shown = as_json(cli(redis_url, namespace, "runs", "show", world["completed"][0], "--json"))
    assert (shown["status"], shown["output"]) == ("COMPLETED", "ok")
    table = cli(redis_url, namespace, "runs", "show", world["failed"][0])
    assert "FAILED" in table.output and "boom" in table.output


def test_runs_cancel_asks_first_and_refuses_a_finished_run(
    redis_url: str, namespace: str, world: dict[str, Any]
) -> None:
    first, second = world["waiting"][:2]
    refused = cli(redis_url, namespace, "runs", "cancel", first, input="n\n")
    assert refused.exit_code == 1 and f"Cancel run {first} (PENDING)?" in refused.output
    status = with_client(redis_url, namespace, lambda c: c.action.status(first))
    assert status.status == RunStatus.PENDING
    asked = cli(redis_url, namespace, "runs", "cancel", first, input="y\n")
    assert asked.exit_code == 0 and f"cancelled {first} (it was PENDING)" in asked.output
    shown = as_json(cli(redis_url, namespace, "runs", "cancel", second, "--yes", "--json"))
    assert (shown["run_id"], shown["status"], shown["error_message"]) == (
        second, "CANCELLED", "cancelled",
    )  # fmt: skip
    finished = cli(redis_url, namespace, "runs", "cancel", world["completed"][0], "--yes")
    assert finished.exit_code == 1 and "already ended COMPLETED" in finished.output
    unknown = cli(redis_url, namespace, "runs", "cancel", "job:999999", "--yes")
    assert unknown.exit_code == 1 and "NotFoundError" in unknown.output


def test_requeue_asks_first_and_does_nothing_on_no(
    redis_url: str, namespace: str, world: dict[str, Any]
) -> None:
    refused = cli(redis_url, namespace, "runs", "requeue", "job", input="n\n")
    assert refused.exit_code == 1
    assert "Re-queue all 3 failed runs" in refused.output
    counts = with_client(redis_url, namespace, lambda c: c.action.counts("job"))
    assert (counts.failed, counts.timed_out) == (2, 1)
    done = cli(redis_url, namespace, "runs", "requeue", "job", "--yes")
    assert done.exit_code == 0 and "re-queued 3 failed run(s)" in done.output
    counts = with_client(redis_url, namespace, lambda c: c.action.counts("job"))
    assert (counts.pending, counts.failed, counts.timed_out) == (6, 0, 0)


def test_requeue_named_runs_and_purge(
    redis_url: str, namespace: str, world: dict[str, Any]
) -> None:
    stranger = cli(redis_url, namespace, "runs", "requeue", "job", "other:1")
    assert stranger.exit_code == 2 and "not runs of 'job'" in stranger.output
    one = cli(redis_url, namespace, "runs", "requeue", "job", world["expired"])
    assert one.exit_code == 0, one.output
    status = with_client(redis_url, namespace, lambda c: c.action.status(world["expired"]))
    assert status.status == RunStatus.PENDING
    asked = cli(redis_url, namespace, "runs", "purge", "job", "--state", "completed", input="y\n")
    assert asked.exit_code == 0 and "purged 3 completed run(s)" in asked.output
    counts = with_client(redis_url, namespace, lambda c: c.action.counts("job"))
    assert counts.completed == 0


def test_workers_list_and_drain(redis_url: str, namespace: str, world: dict[str, Any]) -> None:
    [w1] = as_json(cli(redis_url, namespace, "workers", "list", "--json"))
    assert (w1["worker_id"], w1["task_types"]) == ("w1", ["job"])
    assert "w1" in cli(redis_url, namespace, "workers", "list").output
    assert cli(redis_url, namespace, "workers", "drain", "w1", input="n\n").exit_code == 1
    assert cli(redis_url, namespace, "workers", "drain", "w1", "--yes").exit_code == 0
    [w1] = as_json(cli(redis_url, namespace, "workers", "list", "--json"))
    assert w1["status"] == "DRAINING"
    assert cli(redis_url, namespace, "workers", "deregister", "w1", "--yes").exit_code == 0
    assert as_json(cli(redis_url, namespace, "workers", "list", "--json")) == []


def test_streams_and_dead_letters(redis_url: str, namespace: str, world: dict[str, Any]) -> None:
    [events] = as_json(cli(redis_url, namespace, "streams", "list", "--json"))
    assert (events["stream"], events["info"]["count"]) == ("events", 4)
    info = as_json(cli(redis_url, namespace, "streams", "info", "events", "--json"))
    assert [(g["group"], g["lag"], g["pending"]) for g in info["groups"]] == [("billing", 2, 1)]
    assert "billing" in cli(redis_url, namespace, "streams", "info", "events").output
    [letter] = as_json(
        cli(redis_url, namespace, "dead-letters", "list", "events", "billing", "--json")
    )
    assert (letter["payload"], letter["reason"]) == ("e0", "nacked")
    assert "nacked" in cli(redis_url, namespace, "dead-letters", "list", "events", "billing").output
    replayed = cli(redis_url, namespace, "dead-letters", "replay", "events", "billing", "--yes")
    assert replayed.exit_code == 0 and "replayed 1" in replayed.output
    info = as_json(cli(redis_url, namespace, "streams", "info", "events", "--json"))
    assert [(g["lag"], g["dead_letters"]) for g in info["groups"]] == [(3, 0)]


def test_invoke_prints_the_run_id(redis_url: str, namespace: str, world: dict[str, Any]) -> None:
    out = cli(redis_url, namespace, "invoke", "job", "--data", '{"n": 1}')
    assert out.exit_code == 0, out.output
    run_id = out.output.strip()
    status = with_client(redis_url, namespace, lambda c: c.action.status(run_id))
    assert status.status == RunStatus.PENDING


def test_bad_input_is_a_usage_error(redis_url: str, namespace: str, world: dict[str, Any]) -> None:
    bad_json = cli(redis_url, namespace, "invoke", "job", "--data", "{nope")
    assert bad_json.exit_code == 2 and "not UTF-8 JSON" in bad_json.output
    bad_state = cli(redis_url, namespace, "runs", "list", "job", "--state", "lost")
    assert bad_state.exit_code == 2
    missing = cli(redis_url, namespace, "runs", "list", "nope", "--json")
    assert missing.exit_code == 1 and "no action 'nope'" in missing.output


async def test_invoke_wait_through_the_installed_command(client: FloClient, redis_url: str) -> None:
    await client.action.register("echo")
    await client.worker.register("w1", ["echo"])
    env = {**os.environ, "FLO_REDIS_URL": redis_url, "FLO_REDIS_NAMESPACE": client.namespace}
    proc = await asyncio.create_subprocess_exec(
        FLO_REDIS, "invoke", "echo", "--data", '"hi"', "--wait", "--timeout", "60",
        env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    task = (
        await client.worker.await_task("w1", ["echo"], WorkerAwaitOptions(block_ms=30_000))
    ).task
    assert task is not None and task.payload == b'"hi"'
    await client.worker.complete("w1", "echo", task.task_id, b"HI")
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    assert out.decode().strip() == "HI"
