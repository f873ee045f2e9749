"""The ``flo-redis worker`` command, run as users run it: a real process, real signals."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest
import redis.asyncio as aioredis
from cli_command import Command
from polling import eventually

from flo_redis import FloClient, RunStatus
from flo_redis.types import WorkerListOptions


async def _status(client: FloClient, run_id: str, *wanted: RunStatus) -> object:
    return await eventually(
        lambda: client.action.status(run_id), lambda s: s.status in wanted, timeout=30
    )


async def _workers(client: FloClient, count: int) -> list[object]:
    async def listed() -> list[object]:
        return list((await client.worker.list(WorkerListOptions(limit=100))).workers)

    return await eventually(listed, lambda ws: len(ws) >= count, timeout=30)


async def _handler_started(raw: aioredis.Redis, namespace: str, run_id: str) -> None:
    """Wait until the handler of ``run_id`` runs (cli_app's handlers record their pid):
    RUNNING only says a worker claimed it, maybe before its handler began."""
    await eventually(lambda: raw.exists(f"{namespace}:pid:{run_id}"), bool, timeout=30)


async def _logged(cmd: Command, text: str) -> None:
    async def output() -> str:
        return cmd.output()

    await eventually(output, lambda out: text in out, timeout=30)


def _worker(redis_url: str, namespace: str, *extra: str) -> list[str]:
    return ["worker", "--url", redis_url, "--namespace", namespace, *extra]


async def test_sigterm_lets_the_running_handler_finish_and_exits_0(
    command, client: FloClient, raw: aioredis.Redis, redis_url: str, namespace: str
) -> None:
    cmd = command(*_worker(redis_url, namespace), "cli_app:build")
    await _workers(client, 1)
    run = await client.action.invoke("hold", b"")
    await _status(client, run.run_id, RunStatus.RUNNING)
    cmd.signal(signal.SIGTERM)
    await _logged(cmd, "SIGTERM received")
    assert cmd.proc.poll() is None  # waits for its handler
    await raw.set(f"{namespace}:gate", 1)
    assert cmd.exits(0)
    status = await client.action.status(run.run_id)
    assert status.status == RunStatus.COMPLETED
    assert status.output == str(cmd.proc.pid).encode()
    out = cmd.output()
    assert out.count("SIGTERM received: stopping") == 1
    assert out.count("stopped") >= 1 and "cancelling" not in out
    # A worker that stopped cleanly leaves the registry.
    assert not (await client.worker.list()).workers


async def test_at_the_shutdown_timeout_runs_go_back_without_spending_the_attempt(
    command, client: FloClient, raw: aioredis.Redis, redis_url: str, namespace: str
) -> None:
    cmd = command(*_worker(redis_url, namespace, "--shutdown-timeout", "0.5"), "cli_app:build")
    await _workers(client, 1)
    run = await client.action.invoke("hold", b"")
    await _status(client, run.run_id, RunStatus.RUNNING)
    cmd.signal(signal.SIGTERM)
    assert cmd.exits(0)
    status = await client.action.status(run.run_id)
    assert status.status == RunStatus.PENDING
    assert status.attempt == 0
    assert "shutdown timeout reached: cancelling running handlers" in cmd.output()
    # The next worker gets it as its first attempt.
    await raw.set(f"{namespace}:gate", 1)
    again = command(*_worker(redis_url, namespace), "cli_app:build")
    done = await _status(client, run.run_id, RunStatus.COMPLETED)
    assert done.attempt == 1
    again.signal(signal.SIGTERM)
    assert again.exits(0)


async def test_a_second_signal_gives_runs_back_at_once(
    command, client: FloClient, redis_url: str, namespace: str
) -> None:
    cmd = command(*_worker(redis_url, namespace, "--shutdown-timeout", "3600"), "cli_app:build")
    await _workers(client, 1)
    runs = [await client.action.invoke("hold", b"") for _ in range(3)]
    for run in runs:
        await _status(client, run.run_id, RunStatus.RUNNING)
    cmd.signal(signal.SIGINT)
    await _logged(cmd, "SIGINT received")
    cmd.signal(signal.SIGINT)
    assert cmd.exits(0)
    for run in runs:
        status = await client.action.status(run.run_id)
        assert (status.status, status.attempt) == (RunStatus.PENDING, 0)
    out = cmd.output()
    assert out.count("SIGINT received again: cancelling running handlers") == 1
    assert out.count("SIGINT received: stopping") == 1


async def test_a_handler_that_ignores_cancellation_does_not_hold_the_exit(
    command, client: FloClient, raw: aioredis.Redis, redis_url: str, namespace: str
) -> None:
    cmd = command(*_worker(redis_url, namespace, "--shutdown-timeout", "0"), "cli_app:build")
    await _workers(client, 1)
    run = await client.action.invoke("stubborn", b"")
    await _status(client, run.run_id, RunStatus.RUNNING)
    await _handler_started(raw, namespace, run.run_id)
    cmd.signal(signal.SIGTERM)
    assert cmd.exits(3)
    assert "still running 5 s after they were cancelled" in cmd.output()


async def test_a_plain_def_handler_stuck_in_its_thread_is_given_back_and_left_behind(
    command, client: FloClient, raw: aioredis.Redis, redis_url: str, namespace: str
) -> None:
    cmd = command(*_worker(redis_url, namespace, "--shutdown-timeout", "0.5"), "cli_app:build")
    await _workers(client, 1)
    run = await client.action.invoke("blocking", b"")
    await _status(client, run.run_id, RunStatus.RUNNING)
    await _handler_started(raw, namespace, run.run_id)
    cmd.signal(signal.SIGTERM)
    assert cmd.exits(0)
    status = await client.action.status(run.run_id)
    assert (status.status, status.attempt) == (RunStatus.PENDING, 0)
    assert "a handler thread is still running; exiting without it" in cmd.output()


async def test_processes_restarts_a_killed_child_and_its_runs_come_back(
    command, client: FloClient, raw: aioredis.Redis, redis_url: str, namespace: str
) -> None:
    args = _worker(redis_url, namespace, "--processes", "2", "--concurrency", "1")
    cmd = command(*args, "cli_app:build")
    await _workers(client, 2)
    runs = [await client.action.invoke("hold", b"") for _ in range(2)]
    for run in runs:
        await _status(client, run.run_id, RunStatus.RUNNING)
    pids = {
        run.run_id: int(await eventually(lambda r=run: raw.get(f"{namespace}:pid:{r.run_id}")))
        for run in runs
    }
    assert len(set(pids.values())) == 2  # one run in each child
    victim = runs[0].run_id
    os.kill(pids[victim], signal.SIGKILL)
    # The supervisor starts a new child; the killed child's run is taken back and runs again.
    await _workers(client, 3)
    await eventually(
        lambda: client.action.status(victim),
        lambda s: s.status == RunStatus.RUNNING and s.attempt == 2,
        timeout=30,
    )
    await raw.set(f"{namespace}:gate", 1)
    for run in runs:
        await _status(client, run.run_id, RunStatus.COMPLETED)
    cmd.signal(signal.SIGTERM)
    assert cmd.exits(0)
    out = cmd.output()
    assert "exited with signal SIGKILL; restarting it" in out
    assert out.count("SIGTERM received: stopping 2 worker processes") == 1


def test_a_crash_looping_process_is_restarted_after_doubling_pauses(
    command, redis_url: str
) -> None:
    cmd = command("worker", "--url", redis_url, "--processes", "2", "cli_app:build_broken")
    deadline = time.monotonic() + 60
    while "process 1 (pid" not in cmd.output() or "in 2.0 s" not in cmd.output():
        assert time.monotonic() < deadline, cmd.output()
        time.sleep(0.1)
    cmd.signal(signal.SIGTERM)
    cmd.wait()
    out = cmd.output()
    assert "cli_app:build_broken could not build its worker" in out
    assert "RuntimeError: this worker cannot start" in out  # with its traceback
    for pause in ("0.5", "1.0", "2.0"):
        assert f"exited with code 1; restarting it in {pause} s" in out


@pytest.mark.parametrize(
    "target", ["cli_app:build", "cli_app:build_async", "cli_app:module_worker"]
)
async def test_targets_a_worker_or_a_function_that_builds_one(
    command, client: FloClient, raw: aioredis.Redis, redis_url: str, namespace: str, target: str
) -> None:
    await raw.set(f"{namespace}:gate", 1)
    cmd = command(*_worker(redis_url, namespace), target)
    await _workers(client, 1)
    run = await client.action.invoke("hold", b"")
    await _status(client, run.run_id, RunStatus.COMPLETED)
    cmd.signal(signal.SIGTERM)
    assert cmd.exits(0)


async def test_durability_sets_the_level_of_every_workers_reports(
    command, client: FloClient, raw: aioredis.Redis, redis_url: str, namespace: str
) -> None:
    # The test server has no replica: a complete at replicated is applied on it, and not
    # acknowledged by any replica, so the worker says so and sends it again.
    await raw.set(f"{namespace}:gate", 1)
    cmd = command(
        *_worker(redis_url, namespace, "--durability", "replicated:1:100"), "cli_app:build"
    )
    await _workers(client, 1)
    run = await client.action.invoke("hold", b"")
    await _status(client, run.run_id, RunStatus.COMPLETED)
    await _logged(cmd, "reached 0 of 1 replicas within 100 ms")
    cmd.signal(signal.SIGTERM)
    assert cmd.exits(0)


async def test_a_stream_worker_target(
    command, client: FloClient, raw: aioredis.Redis, redis_url: str, namespace: str
) -> None:
    for i in range(3):
        await client.stream.append("events", f"e{i}".encode())
    cmd = command(*_worker(redis_url, namespace), "cli_app:build_stream")
    await eventually(lambda: raw.scard(f"{namespace}:seen"), lambda n: n == 3, timeout=30)
    cmd.signal(signal.SIGTERM)
    assert cmd.exits(0)


async def test_several_workers_run_in_one_process(
    command, client: FloClient, redis_url: str, namespace: str
) -> None:
    cmd = command(*_worker(redis_url, namespace), "cli_app:build", "cli_app:build_async")
    workers = await _workers(client, 2)
    assert len(workers) == 2
    cmd.signal(signal.SIGTERM)
    assert cmd.exits(0)


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("cli_app", "is not MODULE:ATTR"),
        ("no_such_module:worker", "module 'no_such_module' not found"),
        ("cli_app:nothing", "has no attribute 'nothing'"),
        ("cli_app:not_a_worker", "cli_app:not_a_worker is a int"),
        ("cli_app:build_nothing", "returned a str; it must return an ActionWorker"),
    ],
)
def test_a_bad_target_says_what_is_wrong(
    command, redis_url: str, target: str, message: str
) -> None:
    cmd = command(*_worker(redis_url, "bad"), target)
    assert cmd.wait() != 0
    assert message in cmd.output()


async def test_options_fall_back_to_the_environment(
    command, client: FloClient, redis_url: str, namespace: str
) -> None:
    # FLO_REDIS_URL wins over REDIS_URL; the namespace and concurrency come from env.
    cmd = command(
        "worker",
        "cli_app:build",
        env={
            "FLO_REDIS_URL": redis_url,
            "REDIS_URL": "redis://127.0.0.1:1",
            "FLO_REDIS_NAMESPACE": namespace,
            "FLO_REDIS_CONCURRENCY": "7",
            "FLO_REDIS_LOG_FORMAT": "json",
        },
    )
    (info,) = await _workers(client, 1)
    assert info.max_concurrency == 7
    cmd.signal(signal.SIGTERM)
    assert cmd.exits(0)
    lines = [json.loads(line) for line in cmd.output().splitlines()]
    assert {"time", "level", "logger", "message", "process"} <= set(lines[0])
    assert any(line["message"].startswith("SIGTERM received") for line in lines)


async def test_redis_url_is_read_when_flo_redis_url_is_not_set(
    command, client: FloClient, redis_url: str, namespace: str
) -> None:
    cmd = command(
        "worker",
        "--namespace",
        namespace,
        "--log-level",
        "warning",
        "cli_app:build",
        env={"REDIS_URL": redis_url},
    )
    await _workers(client, 1)
    cmd.signal(signal.SIGTERM)
    assert cmd.exits(0)
    assert "INFO" not in cmd.output()  # --log-level warning


async def test_command_line_options_win_over_the_environment(
    command, client: FloClient, redis_url: str, namespace: str
) -> None:
    cmd = command(
        *_worker(redis_url, namespace, "--concurrency", "3"),
        "cli_app:build",
        env={"FLO_REDIS_URL": "redis://127.0.0.1:1", "FLO_REDIS_CONCURRENCY": "9"},
    )
    (info,) = await _workers(client, 1)
    assert info.max_concurrency == 3
    cmd.signal(signal.SIGTERM)
    assert cmd.exits(0)


def test_an_unreachable_redis_is_one_error_line_and_exit_1(command) -> None:
    cmd = command("worker", "--url", "redis://127.0.0.1:1", "cli_app:build")
    assert cmd.exits(1)
    assert "cannot reach Redis at redis://127.0.0.1:1" in cmd.output()


async def test_what_start_up_made_is_left_out_of_the_collectors_passes(
    command, client: FloClient, redis_url: str, namespace: str
) -> None:
    """The command's process has its start-up objects frozen (gc.freeze), so the
    collector's full passes during the work do not walk the modules and the app."""
    cmd = command(*_worker(redis_url, namespace), "cli_app:build")
    await _workers(client, 1)
    run = await client.action.invoke("frozen", b"")
    status = await _status(client, run.run_id, RunStatus.COMPLETED)
    assert int(status.output) > 10_000  # type: ignore[attr-defined]
    cmd.signal(signal.SIGTERM)
    assert cmd.exits(0)
