"""``flo-redis worker --executor process``, run as users run it: plain ``def`` handlers
(tests/support/process_app.py) in handler processes that a time limit, a cancel, a
memory limit or a crash really stops, each costing only its own run."""

from __future__ import annotations

import asyncio
import json
import signal
import time

import pytest
import redis.asyncio as aioredis
from cli_command import Command
from polling import eventually

from flo_redis import FloClient, RunStatus
from flo_redis.types import WorkerListOptions

pytestmark = pytest.mark.slow  # worker commands with handler processes, seconds each
ENDED = (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED)


def _worker(command, redis_url: str, namespace: str, *extra: str, **env: str) -> Command:
    return command(
        "worker",
        "--url",
        redis_url,
        "--namespace",
        namespace,
        "--executor",
        "process",
        *extra,
        "process_app:build",
        env={"PROCESS_APP_URL": redis_url, **env},
    )


async def _ready(client: FloClient, count: int = 1) -> None:
    async def listed() -> int:
        return len((await client.worker.list(WorkerListOptions(limit=100))).workers)

    await eventually(listed, lambda n: n >= count, timeout=60, what="workers registered")


async def _ended(client: FloClient, run_id: str, timeout: float = 60) -> object:
    return await eventually(
        lambda: client.action.status(run_id), lambda s: s.status in ENDED, timeout=timeout
    )


async def _starts(
    raw: aioredis.Redis, namespace: str, run_id: str, count: int
) -> list[tuple[int, float]]:
    """(process id, start time) of each attempt's handler, once ``count`` began."""
    key = f"{namespace}:started:{run_id}"
    entries = await eventually(
        lambda: raw.lrange(key, 0, -1), lambda e: len(e) >= count, timeout=60
    )
    return [(int(p), float(t)) for p, t in (e.decode().split() for e in entries)]


async def _gone(pid: int, timeout: float = 30) -> float:
    """When process ``pid`` is gone (polled every 5 ms)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _gone_now(pid):
            return time.time()
        await asyncio.sleep(0.005)
    raise AssertionError(f"process {pid} still there after {timeout} s")


def _gone_now(pid: int) -> bool:
    """Whether ``pid`` has exited (gone, or a zombie its parent has not reaped yet)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


async def test_a_busy_loop_is_stopped_at_its_time_limit_and_its_run_retried(
    command, client: FloClient, raw: aioredis.Redis, redis_url: str, namespace: str
) -> None:
    cmd = _worker(command, redis_url, namespace, "--concurrency", "1", PROCESS_APP_TIMEOUT="1")
    await _ready(client)
    run = await client.action.invoke("spin", b"")
    status = await _ended(client, run.run_id)
    assert status.status == RunStatus.COMPLETED, cmd.output()
    assert (status.attempt, status.output) == (2, b"second")
    (pid1, began1), (pid2, began2) = await _starts(raw, namespace, run.run_id, 2)
    # The exception its time limit raised ended the loop: the same process ran the retry.
    assert pid1 == pid2
    assert began2 - began1 >= 1.0


async def test_a_handler_that_swallows_its_stop_is_killed_after_the_grace_and_retried(
    command, client: FloClient, raw: aioredis.Redis, redis_url: str, namespace: str
) -> None:
    timeout, grace = 1.0, 0.5
    cmd = _worker(
        command,
        redis_url,
        namespace,
        "--concurrency",
        "1",
        "--stop-grace",
        str(grace),
        PROCESS_APP_TIMEOUT=str(timeout),
    )
    await _ready(client)
    run = await client.action.invoke("stubborn", b"")
    ((pid1, began1),) = await _starts(raw, namespace, run.run_id, 1)
    died = await _gone(pid1)
    status = await _ended(client, run.run_id)
    assert status.status == RunStatus.COMPLETED, cmd.output()
    assert (status.attempt, status.output) == (2, b"second")
    (_, _), (pid2, _) = await _starts(raw, namespace, run.run_id, 2)
    assert pid2 != pid1  # a new process in its place
    # Killed once the grace after its time limit ran out: not before, and soon after
    # (within about 50 ms on a quiet machine, printed; the bound leaves room for a machine
    # running other test processes, whose worker's event loop may lag by a few tenths).
    late = died - (began1 + timeout + grace)
    print(f"killed {late:+.3f} s after its grace")
    assert -0.05 <= late <= 1.0, f"killed {late:+.3f} s after its grace"
    assert "killing its process" in cmd.output()


async def test_a_cancel_stops_a_def_handler_asleep_for_an_hour_within_a_second(
    command, client: FloClient, raw: aioredis.Redis, redis_url: str, namespace: str
) -> None:
    cmd = _worker(command, redis_url, namespace, "--concurrency", "1")
    await _ready(client)
    run = await client.action.invoke("sleeper", b"")
    ((pid, _),) = await _starts(raw, namespace, run.run_id, 1)
    asked = time.time()
    await client.action.cancel(run.run_id)
    ended = float(
        (await eventually(lambda: raw.lpop(f"{namespace}:ended:{run.run_id}"), timeout=30)).decode()
    )
    assert ended - asked < 1.0, f"stopped {ended - asked:.3f} s after the cancel"
    assert (await client.action.status(run.run_id)).status == RunStatus.CANCELLED
    # The handler took its stop: its process is whole and runs the next run.
    after = await client.action.invoke("echo", b"1")
    status = await _ended(client, after.run_id)
    assert status.status == RunStatus.COMPLETED, cmd.output()
    assert f'"pid": {pid}' in status.output.decode()


async def test_a_handler_past_the_memory_limit_dies_and_its_99_siblings_complete(
    command, client: FloClient, redis_url: str, namespace: str
) -> None:
    cmd = _worker(command, redis_url, namespace, "--concurrency", "4", "--memory-limit-mb", "512")
    await _ready(client)
    hog = await client.action.invoke("hog", b"hog")
    siblings = [await client.action.invoke("hog", str(i).encode()) for i in range(99)]
    status = await _ended(client, hog.run_id, timeout=120)
    assert status.status == RunStatus.FAILED, cmd.output()
    assert "past the memory limit of 512 MB" in status.error_message
    assert status.attempt == 2  # its retry met the same end
    for sibling in siblings:
        done = await _ended(client, sibling.run_id)
        assert (done.status, done.output) == (RunStatus.COMPLETED, b"fine")


async def test_a_handler_that_exits_or_segfaults_fails_only_its_own_run(
    command, client: FloClient, redis_url: str, namespace: str
) -> None:
    cmd = _worker(command, redis_url, namespace, "--concurrency", "2")
    await _ready(client)
    exits = await client.action.invoke("crash", b"exit")
    segv = await client.action.invoke("crash", b"segv")
    fine = [await client.action.invoke("crash", b"fine") for _ in range(20)]
    exited = await _ended(client, exits.run_id)
    faulted = await _ended(client, segv.run_id)
    assert exited.status == RunStatus.FAILED, cmd.output()
    assert exited.error_message == "HandlerProcessLost: its handler process exited with status 3"
    assert faulted.error_message == (
        "HandlerProcessLost: its handler process was killed by signal SIGSEGV"
    )
    for run in fine:
        assert (await _ended(client, run.run_id)).status == RunStatus.COMPLETED


RELOADED_APP = """
from process_app import commit
from flo_redis import ActionRegisterOptions

VERSION = {version!r}


def ledger(ctx):
    commit(ctx, 0.02)
    return VERSION


def build(client):
    worker = client.new_action_worker(concurrency=4, block_ms=1000)
    # Every run is kept to be checked: how many are invoked while the workers reload
    # depends on the machine (10,100 seen), past the default retention of 10,000.
    options = ActionRegisterOptions(max_retries=3, retention_count=1_000_000)
    worker.register_action("ledger", ledger, options)
    return worker
"""


async def test_a_rolling_restart_of_four_workers_at_full_load_loses_nothing_and_runs_nothing_twice(
    command, client: FloClient, raw: aioredis.Redis, redis_url: str, namespace: str, tmp_path
) -> None:
    app = tmp_path / "reloaded_app.py"
    app.write_text(RELOADED_APP.format(version="one"))
    env = {"PROCESS_APP_URL": redis_url, "PYTHONPATH": str(tmp_path)}
    args = ["worker", "--url", redis_url, "--namespace", namespace, "--executor", "process"]
    workers = [command(*args, "reloaded_app:build", env=env) for _ in range(4)]
    await _ready(client, 4)
    before: list[str] = []

    feeding = True

    async def feed() -> None:  # full load: at least 300 runs wait, while reloads go on
        while feeding:
            if len(before) - await raw.hlen(f"{namespace}:ledger") < 300:
                invoked = await client.action.invoke_many("ledger", [b""] * 100)
                before.extend(r.run_id for r in invoked)
            await asyncio.sleep(0.02)

    feeder = asyncio.create_task(feed())
    await eventually(lambda: raw.hlen(f"{namespace}:ledger"), lambda n: n >= 300, timeout=60)
    # New code on disk (another length, so no cached bytecode is taken for it), then
    # each worker told in turn, the next once the last has reloaded, while runs flow.
    app.write_text(RELOADED_APP.format(version="second"))
    for worker in workers:
        done_before = await raw.hlen(f"{namespace}:ledger")
        worker.signal(signal.SIGHUP)
        await eventually(
            lambda w=worker: w.output(),
            lambda out: "reloaded: 4 started" in out,
            timeout=60,
            what="the reload",
        )
        assert await raw.hlen(f"{namespace}:ledger") > done_before  # runs went on meanwhile
    feeding = False  # not a cancel: one taken mid-call would invoke runs it never records
    await feeder
    print(f"{len(before)} runs invoked while 4 workers reloaded in turn")
    after = [r.run_id for r in await client.action.invoke_many("ledger", [b""] * 200)]
    runs = [*before, *after]
    await eventually(lambda: raw.hlen(f"{namespace}:ledger"), lambda n: n >= len(runs), timeout=120)
    statuses = [await client.action.status(run_id) for run_id in runs]
    assert {s.status for s in statuses} == {RunStatus.COMPLETED}
    assert {s.attempt for s in statuses} == {1}  # none taken back, none retried
    starts = await raw.hgetall(f"{namespace}:starts")
    ledger = await raw.hgetall(f"{namespace}:ledger")
    assert len(ledger) == len(runs) and set(ledger.values()) == {b"1"}  # nothing lost or twice
    assert len(starts) == len(runs) and set(starts.values()) == {b"1"}
    # Runs invoked once every worker had reloaded ran the new code.
    assert {s.output for s in statuses[len(before) :]} == {b'"second"'}
    assert {s.output for s in statuses[: len(before)]} == {b'"one"', b'"second"'}
    for worker in workers:
        assert "Traceback" not in worker.output(), worker.output()


def test_limits_of_handler_processes_without_the_process_executor_are_a_usage_error(
    redis_url: str, namespace: str
) -> None:
    from cli_command import flo_redis

    done = flo_redis(redis_url, namespace, "worker", "--memory-limit-mb", "512", "cli_app:build")
    assert done.returncode == 2
    assert "--memory-limit-mb needs --executor process" in done.stderr


async def test_sighup_to_the_supervisor_reloads_every_worker_process(
    command, client: FloClient, redis_url: str, namespace: str
) -> None:
    cmd = _worker(command, redis_url, namespace, "--processes", "2", "--concurrency", "1")
    await _ready(client, 2)
    cmd.signal(signal.SIGHUP)
    await eventually(
        lambda: cmd.output().count("reloaded: 1 started, 1 retiring"),
        lambda n: n == 2,
        timeout=60,
        what="both worker processes reloaded",
    )
    run = await client.action.invoke("echo", b"2")
    assert (await _ended(client, run.run_id)).status == RunStatus.COMPLETED
    cmd.signal(signal.SIGTERM)
    assert cmd.exits(0)


def test_a_handler_a_process_cannot_import_is_a_usage_error_before_any_worker_starts(
    redis_url: str, namespace: str, tmp_path
) -> None:
    from cli_command import flo_redis

    (tmp_path / "nested_app.py").write_text(
        "def build(client):\n"
        "    worker = client.new_action_worker()\n"
        "    def resize(ctx):\n"
        "        return b''\n"
        "    worker.register_action('resize', resize)\n"
        "    return worker\n"
    )
    env = {"PYTHONPATH": str(tmp_path)}
    args = ("worker", "--executor", "process", "nested_app:build")
    done = flo_redis(redis_url, namespace, *args, env=env)
    assert done.returncode == 2, done.stderr
    assert "the handler of action 'resize' runs in a process" in done.stderr
    assert "Traceback" not in done.stderr
    # Refused before anything was written: no namespace, no action registered.
    listed = flo_redis(redis_url, namespace, "workers", "list")
    assert f"no namespace '{namespace}'" in listed.stderr


async def test_a_handler_in_a_process_logs_through_the_workers_logging(
    command, client: FloClient, redis_url: str, namespace: str
) -> None:
    cmd = _worker(command, redis_url, namespace, "--concurrency", "1", "--log-format", "json")
    await _ready(client)
    run = await client.action.invoke("logs", b"order 7")
    assert (await _ended(client, run.run_id)).status == RunStatus.COMPLETED
    lines = [json.loads(line) for line in cmd.output().splitlines() if line.startswith("{")]
    mine = [line for line in lines if line["logger"] == "process_app"]
    assert [line["message"] for line in mine] == ["handling order 7", "a division went wrong"]
    assert {line["run_id"] for line in mine} == {run.run_id}
    assert {line["action"] for line in mine} == {"logs"}
    assert mine[0]["process"] != cmd.proc.pid  # logged in its handler process
    assert "ZeroDivisionError: division by zero" in mine[1]["exc"]
