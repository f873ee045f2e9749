"""The process executor, through a real worker: plain ``def`` handlers in handler
processes (tests/support/process_app.py), their results, errors, outcomes, touches and
progress, and what a stop, a crash or a memory limit does to them and to nothing else."""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import process_app
import pytest
import redis.asyncio as aioredis
from polling import eventually, registered, running

from flo_redis import (
    ActionRegisterOptions,
    FloClient,
    HandlerProcessError,
    ProcessExecutor,
    RunStatus,
    StreamGroupJoinOptions,
    ValidationError,
)
from flo_redis.worker import ActionWorker


@pytest.fixture(autouse=True)
def _app_url(redis_url: str) -> Iterator[None]:
    os.environ["PROCESS_APP_URL"] = redis_url
    yield
    os.environ.pop("PROCESS_APP_URL", None)


async def _ended(client: FloClient, run_id: str, timeout: float = 30) -> object:
    done = (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED)
    return await eventually(
        lambda: client.action.status(run_id), lambda s: s.status in done, timeout=timeout
    )


async def test_a_def_handler_runs_in_a_process_of_its_own_and_its_value_comes_back(
    client: FloClient,
) -> None:
    worker = process_app.worker(client, ProcessExecutor(size=2), 2, 30)
    async with running(worker, ready=registered):
        run = await client.action.invoke("echo", b'{"a": 1}')
        status = await _ended(client, run.run_id)
    assert status.status == RunStatus.COMPLETED
    value = json.loads(status.output)
    assert value["got"] == {"a": 1}
    assert value["pid"] != os.getpid()


async def test_a_run_waiting_for_a_free_process_is_not_yet_timed(client: FloClient) -> None:
    # One process, three runs of 1 s each under a 1.5 s limit: the third waits about 2 s
    # for the process, past its limit, and its limit counts from when its handler begins
    # there: none times out (a timed out run in a process is retried: the attempts tell).
    worker = process_app.worker(client, ProcessExecutor(size=1), 3, 1.5)
    async with running(worker, ready=registered):
        runs = [await client.action.invoke("nap", b"1.0") for _ in range(3)]
        statuses = [await _ended(client, run.run_id) for run in runs]
    ended = [(s.status, s.output, s.attempt, s.error_message) for s in statuses]
    assert ended == [(RunStatus.COMPLETED, b"1.0", 1, None)] * 3


async def test_an_outcome_a_touch_and_a_progress_from_a_process_reach_the_run(
    client: FloClient,
) -> None:
    worker = process_app.worker(client, ProcessExecutor(size=1), 1, 30)
    async with running(worker, ready=registered):
        run = await client.action.invoke("touching", b"")
        status = await _ended(client, run.run_id)
    assert status.status == RunStatus.COMPLETED, status
    assert status.outcome == "touched"
    assert b"pid" in status.output


async def test_errors_from_a_process_keep_their_type_text_and_traceback(
    client: FloClient,
) -> None:
    worker = process_app.worker(client, ProcessExecutor(size=1), 1, 30)
    async with running(worker, ready=registered):
        refused = await client.action.invoke("refuse", b"nope")
        odd = await client.action.invoke("odd", b"")
        mute = await client.action.invoke("mute", b"")
        refused_status = await _ended(client, refused.run_id)
        odd_status = await _ended(client, odd.run_id, timeout=60)
        mute_status = await _ended(client, mute.run_id, timeout=60)
    # NonRetryableError pickles: failed for good on its first attempt.
    assert refused_status.status == RunStatus.FAILED
    assert refused_status.error_message == "NonRetryableError: bad input: nope"
    assert refused_status.attempt == 1
    # An exception whose __init__ does not take its args back keeps its name and text.
    assert odd_status.error_message == "_Odd: odd 7 at here"
    # The traceback is the child's: the handler's own frame and line.
    assert 'process_app.py", line' in odd_status.error_traceback
    assert 'raise _Odd(7, "here")' in odd_status.error_traceback
    # One whose text cannot be had fails its run as its own error, not as a lost process.
    assert mute_status.error_message == "_Mute: (its text could not be had: RuntimeError)"


async def test_rate_limited_from_a_process_gives_the_run_back_unspent_to_wait(
    client: FloClient,
) -> None:
    worker = process_app.worker(client, ProcessExecutor(size=1), 1, 30)
    async with running(worker, ready=registered):
        run = await client.action.invoke("limited", b"")
        status = await _ended(client, run.run_id)
    assert (status.status, status.output) == (RunStatus.COMPLETED, b"after the wait")
    assert status.attempt == 1  # the wait spent no attempt


async def test_a_child_is_replaced_after_its_most_runs(client: FloClient) -> None:
    worker = process_app.worker(client, ProcessExecutor(size=1, max_runs_per_child=2), 1, 30)
    pids = []
    async with running(worker, ready=registered):
        for i in range(5):
            run = await client.action.invoke("echo", str(i).encode())
            status = await _ended(client, run.run_id)
            pids.append(json.loads(status.output)["pid"])
    assert pids[0] == pids[1] != pids[2] == pids[3] != pids[4]


@pytest.mark.parametrize("handler", ["sleeper", "tidy"])
async def test_an_aborted_worker_stops_its_process_handlers_and_gives_their_runs_back(
    client: FloClient, raw: aioredis.Redis, namespace: str, handler: str
) -> None:
    # "tidy" cleans up for half a second: within the grace, however often the worker's
    # abort cancels its handlers again meanwhile.
    worker = process_app.worker(client, ProcessExecutor(size=1, grace_s=5), 1, 30)
    async with running(worker, ready=registered) as task:
        run = await client.action.invoke(handler, b"")
        await eventually(lambda: raw.exists(f"{namespace}:started:{run.run_id}"), timeout=30)
        worker.abort()
        await asyncio.wait_for(task, 30)
        # The handler took its stop (its finally ran) before the worker ended.
        assert await raw.exists(f"{namespace}:ended:{run.run_id}")
    status = await client.action.status(run.run_id)
    assert status.status == RunStatus.PENDING  # given back, its attempt not spent
    assert status.attempt == 0


def test_bad_process_executor_settings_are_refused_by_name() -> None:
    for settings, named in (
        ({"size": 0}, "ProcessExecutor.size"),
        ({"size": True}, "ProcessExecutor.size"),
        ({"max_runs_per_child": -1}, "ProcessExecutor.max_runs_per_child"),
        ({"memory_limit_mb": 2**21}, "ProcessExecutor.memory_limit_mb"),
        ({"grace_s": 0}, "ProcessExecutor.grace_s"),
        ({"grace_s": float("nan")}, "ProcessExecutor.grace_s"),
        ({"start_timeout_s": -1}, "ProcessExecutor.start_timeout_s"),
    ):
        with pytest.raises(ValidationError, match=named):
            ProcessExecutor(**settings)  # type: ignore[arg-type]


async def _async_handler(ctx: object) -> bytes:
    return b""


def test_a_handler_a_process_cannot_run_is_refused_as_it_is_registered(
    client: FloClient,
) -> None:
    worker = client.new_action_worker()
    executor = ProcessExecutor()
    with pytest.raises(ValidationError, match=r"'nested'.*module-level def"):
        worker.register_action("nested", lambda ctx: b"", executor=executor)
    with pytest.raises(ValidationError, match="'later' is async"):
        worker.register_action("later", _async_handler, executor=executor)
    with pytest.raises(ValidationError, match="must be a ProcessExecutor"):
        worker.register_action("odd", process_app.noop, executor="process")  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="executor must be a ProcessExecutor"):
        client.new_action_worker(executor="process")  # type: ignore[arg-type]


async def test_a_worker_whose_handlers_cannot_start_in_a_process_says_why_and_registers_nothing(
    client: FloClient, tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "breaks_in_child.py").write_text(
        "import os\n"
        "if os.environ.get('BREAK_ON_IMPORT'):\n"
        "    raise ImportError('this module does not import here')\n"
        "def handler(ctx):\n"
        "    return b''\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    import breaks_in_child  # type: ignore[import-not-found]

    monkeypatch.setenv("BREAK_ON_IMPORT", "1")  # a new process cannot import it now
    worker = client.new_action_worker(executor=ProcessExecutor(size=1))
    worker.register_action("breaks", breaks_in_child.handler)
    with pytest.raises(HandlerProcessError, match="this module does not import here"):
        await asyncio.wait_for(worker.start(), 60)
    assert [a.name for a in (await client.action.list()).actions] == []

    lambdas = client.new_action_worker(executor=ProcessExecutor(size=1))
    lambdas.register_action("nested", lambda ctx: b"")
    with pytest.raises(ValidationError, match=r"'nested'.*module-level def"):
        await lambdas.start()


EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "process_worker.py"


@pytest.mark.slow
async def test_the_example_runs_its_main_module_handlers_in_processes(
    client: FloClient, redis_url: str, namespace: str
) -> None:
    env = {**os.environ, "FLO_REDIS_URL": redis_url, "FLO_REDIS_NAMESPACE": namespace}
    example = subprocess.Popen([sys.executable, str(EXAMPLE)], env=env)  # noqa: ASYNC220
    try:
        await eventually(
            lambda: client.worker.list(), lambda r: bool(r.workers), timeout=60, what="a worker"
        )
        done = await client.action.invoke("checksum", b"abc")
        slow = await client.action.invoke("render", b'{"seconds": 30}')
        quick = await client.action.invoke("render", b'{"seconds": 0.05}')
        status = await _ended(client, done.run_id, timeout=60)
        assert status.status == RunStatus.COMPLETED
        expected = b"abc"
        for _ in range(10_000):
            expected = hashlib.sha256(expected).digest()
        assert json.loads(status.output) == expected.hex()
        rendered = await _ended(client, quick.run_id)
        assert json.loads(rendered.output)["pid"] != example.pid
        stopped = await _ended(client, slow.run_id, timeout=60)
        assert (stopped.status, stopped.attempt) == (RunStatus.FAILED, 2)
        assert stopped.error_message == "Action timed out"
    finally:
        example.send_signal(signal.SIGTERM)
        assert example.wait(30) == 0


@pytest.mark.slow
def test_a_main_module_that_starts_a_worker_unguarded_is_refused_not_started_again(
    redis_url: str, namespace: str, tmp_path: Path
) -> None:
    script = tmp_path / "unguarded.py"
    script.write_text(
        "import asyncio, sys\n"
        "from flo_redis import FloClient, ProcessExecutor\n"
        "def handler(ctx):\n"
        "    return b'main'\n"
        "async def main():\n"
        f"    async with FloClient({redis_url!r}, namespace={namespace!r}) as client:\n"
        "        worker = client.new_action_worker(executor=ProcessExecutor(size=1))\n"
        "        worker.register_action('m', handler)\n"
        "        await worker.start()\n"
        "asyncio.run(main())\n"
    )
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode != 0
    assert "HandlerProcessError" in done.stderr
    assert 'start it under if __name__ == "__main__"' in done.stderr


@pytest.mark.slow
async def test_replaced_handler_processes_are_counted_by_reason(client: FloClient) -> None:
    from prometheus_client import CollectorRegistry

    from flo_redis.ops.metrics import PrometheusObserver

    registry = CollectorRegistry()
    worker = process_app.worker(client, ProcessExecutor(size=1, max_runs_per_child=2), 1, 30)
    worker.observer = PrometheusObserver(registry)

    def replaced(reason: str) -> float:
        value = registry.get_sample_value(
            "flo_redis_handler_processes_replaced_total", {"reason": reason}
        )
        return value or 0.0

    async with running(worker, ready=registered):
        crash = await client.action.invoke("crash", b"exit")
        await eventually(lambda: replaced("crashed"), lambda n: n >= 1, timeout=30)
        for i in range(2):
            await _ended(client, (await client.action.invoke("echo", str(i).encode())).run_id)
        await eventually(lambda: replaced("worn"), lambda n: n >= 1, timeout=30)
        # A run ends once the worn child's replacement is there; a reload retires it,
        # and leaves the pool at its size.
        await _ended(client, (await client.action.invoke("echo", b"2")).run_id)
        assert await worker.reload() == 1
        assert replaced("reloaded") == 1
        (pool,) = worker._pools.pools
        assert len([c for c in pool._children if not c.retiring]) == 1
        await _ended(client, crash.run_id)


@pytest.mark.slow
async def test_a_stream_worker_runs_its_def_handler_in_processes(
    client: FloClient, raw: aioredis.Redis, namespace: str
) -> None:
    options = StreamGroupJoinOptions(max_deliver=2, ack_timeout_ms=60_000)
    await client.stream.group_join("events", "etl", "setup", options)
    for payload in (b"a", b"spin", b"crash", b"b"):
        await client.stream.append("events", payload)
    worker = client.new_stream_worker(
        stream="events",
        group="etl",
        handler=process_app.record,
        message_timeout=1.0,
        block_ms=500,
        executor=ProcessExecutor(size=2),
    )
    async with running(worker):
        seen = await eventually(
            lambda: raw.hgetall(f"{namespace}:records"), lambda r: len(r) == 3, timeout=60
        )
        letters = await eventually(lambda: client.stream.dead_letters("events", "etl"), bool)
        assert await worker.reload() == 1
    # Each handled in a handler process; the busy one stopped at its time limit and
    # handled on its next delivery; the one that crashed its process dead-lettered.
    assert set(seen) == {b"a", b"b", b"spin"}
    assert str(os.getpid()).encode() not in set(seen.values())
    assert [(d.payload, d.delivery_count) for d in letters] == [(b"crash", 2)]


async def _in_turn(
    client: FloClient, calls: list[tuple[str, bytes]], concurrency: int = 1
) -> list[Any]:
    """The end status of each (action, input) of ``calls``, invoked in turn on a worker
    of one handler process that is still running after the last."""
    worker = process_app.worker(client, ProcessExecutor(size=1), concurrency, 30)
    statuses = []
    async with running(worker, ready=registered) as task:
        for action, data in calls:
            run = await client.action.invoke(action, data)
            statuses.append(await _ended(client, run.run_id, timeout=60))
        assert not task.done()
    return statuses


async def test_a_handler_that_raises_system_exit_or_keyboard_interrupt_fails_only_its_run(
    client: FloClient,
) -> None:
    calls = [("quits", b"exit"), ("quits", b"interrupt"), ("noop", b"")]
    exited, interrupted, fine = await _in_turn(client, calls)
    assert (exited.status, exited.attempt) == (RunStatus.FAILED, 2)
    assert exited.error_message.startswith("SystemExit")
    assert (interrupted.status, interrupted.attempt) == (RunStatus.FAILED, 2)
    assert interrupted.error_message.startswith("KeyboardInterrupt")
    assert fine.status == RunStatus.COMPLETED


async def test_a_value_the_worker_cannot_load_fails_its_run_and_the_worker_goes_on(
    client: FloClient,
) -> None:
    status, fine = await _in_turn(client, [("unreadable", b""), ("echo", b"1")])
    assert status.status == RunStatus.FAILED
    assert "could not be read by the worker" in status.error_message
    assert "__mp_main__" in status.error_message
    assert fine.status == RunStatus.COMPLETED


def _handler_processes(besides: frozenset[int] = frozenset()) -> list[int]:
    """The handler processes this process started that are still alive, but for
    ``besides``."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cmdline = (entry / "cmdline").read_bytes()
            pid = int(entry.name)
        except (OSError, ValueError, IndexError):
            continue
        if ppid == os.getpid() and b"flo_redis.worker.child" in cmdline and pid not in besides:
            found.append(pid)
    return found


def _slow_to_restart(
    client: FloClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[ActionWorker, Callable[[], list[int]]]:
    """A worker of one handler process for action "crash" (one attempt; its process
    exits), whose handler module takes 2 s to import in a process once SLOW_START is
    set; and what lists its handler processes."""
    (tmp_path / "slow_start.py").write_text(
        "import os, time\n"
        "if os.environ.get('SLOW_START'):\n"
        "    time.sleep(2)\n"
        "def crash(ctx):\n"
        "    os._exit(3)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    import slow_start  # type: ignore[import-not-found]

    others = frozenset(_handler_processes())  # earlier tests', still ending
    worker = client.new_action_worker(executor=ProcessExecutor(size=1), block_ms=1000)
    worker.register_action("crash", slow_start.crash, ActionRegisterOptions(max_retries=1))
    return worker, functools.partial(_handler_processes, others)


async def _reloading(
    worker: ActionWorker, ours: Callable[[], list[int]], monkeypatch: pytest.MonkeyPatch
) -> asyncio.Task[int]:
    """``worker.reload()`` under way: its new process started, not yet ready."""
    monkeypatch.setenv("SLOW_START", "1")  # processes started from now take 2 s
    reload = asyncio.create_task(worker.reload())
    await eventually(ours, lambda pids: len(pids) == 2, what="a new process")
    return reload


@pytest.mark.slow
async def test_a_process_in_place_of_one_that_crashed_during_a_reload_is_not_one_too_many(
    client: FloClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    worker, ours = _slow_to_restart(client, tmp_path, monkeypatch)
    async with running(worker, ready=registered):
        reload = await _reloading(worker, ours, monkeypatch)
        run = await client.action.invoke("crash", b"")  # its process ends as the new starts
        assert (await _ended(client, run.run_id)).status == RunStatus.FAILED
        assert await asyncio.wait_for(reload, 30) == 1
        # The pool's size: the new process, not it and the one started for the crash.
        await eventually(ours, lambda pids: len(pids) == 1, what="one process")


@pytest.mark.slow
async def test_a_reload_that_ends_after_its_worker_stopped_leaves_no_process_behind(
    client: FloClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    worker, ours = _slow_to_restart(client, tmp_path, monkeypatch)
    async with running(worker, ready=registered) as task:
        reload = await _reloading(worker, ours, monkeypatch)
        worker.stop()
        await asyncio.wait_for(task, 30)
        await asyncio.gather(reload, return_exceptions=True)
    await eventually(ours, lambda pids: not pids, timeout=10, what="no process left")
