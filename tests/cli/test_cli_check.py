"""``flo-redis check``: the health probe's exit codes and its one line, run as a command."""

from __future__ import annotations

import signal
import subprocess
import sys

from cli_command import Command
from polling import eventually

from flo_redis import FloClient
from flo_redis.types import WorkerStatus


def check(redis_url: str, namespace: str, *args: str) -> tuple[int, str]:
    done = subprocess.run(
        [sys.executable, "-m", "flo_redis.cli", "check", "--url", redis_url,
         "--namespace", namespace, *args],
        capture_output=True,
        timeout=60,
    )  # fmt: skip
    return done.returncode, (done.stdout + done.stderr).decode().strip()


async def test_a_running_worker_is_healthy_by_id_and_by_action(
    command, client: FloClient, redis_url: str, namespace: str
) -> None:
    cmd: Command = command("worker", "--url", redis_url, "--namespace", namespace, "cli_app:build")

    async def listed() -> list[object]:
        return list((await client.worker.list()).workers)

    (info,) = await eventually(listed, lambda ws: len(ws) == 1, timeout=30)
    code, line = check(redis_url, namespace, "--worker", info.worker_id)
    assert (code, line.splitlines()) == (0, [line])
    assert line.startswith(f"ok: worker {info.worker_id} is ACTIVE")
    code, line = check(redis_url, namespace, "--action", "hold")
    assert (code, line) == (
        0,
        f"ok: 1 worker(s) of action 'hold' ACTIVE in namespace '{namespace}'",
    )
    cmd.signal(signal.SIGTERM)
    assert cmd.exits(0)
    # Stopped cleanly: no longer registered, so no longer healthy.
    code, line = check(redis_url, namespace, "--action", "hold")
    assert (code, line) == (1, f"unhealthy: no worker of action 'hold' is registered in "
                               f"namespace '{namespace}'")  # fmt: skip


async def test_an_unknown_worker_is_unhealthy(
    client: FloClient, redis_url: str, namespace: str
) -> None:
    await client.action.register("resize")
    code, line = check(redis_url, namespace, "--worker", "nobody")
    assert (code, line) == (1, f"unhealthy: no worker 'nobody' is registered in namespace "
                               f"'{namespace}'")  # fmt: skip
    code, line = check(redis_url, namespace[:-1], "--worker", "nobody")
    assert code == 1 and line.startswith(f"unhealthy: no namespace '{namespace[:-1]}'")


async def test_a_silent_worker_is_unhealthy_and_one_unhealthy_worker_fails_its_action(
    client: FloClient, redis_url: str, namespace: str
) -> None:
    await client.worker.configure(heartbeat_timeout_ms=100, remove_after_ms=600_000)
    await client.worker.register("quiet", ["resize"])
    await eventually(
        lambda: client.worker.list(),
        lambda page: page.workers[0].status == WorkerStatus.UNHEALTHY,
        timeout=30,
    )
    code, line = check(redis_url, namespace, "--worker", "quiet")
    assert code == 1 and line.startswith("unhealthy: worker quiet is UNHEALTHY (last heartbeat")
    await client.worker.configure(heartbeat_timeout_ms=90_000)
    await client.worker.register("busy", ["resize"])
    await client.worker.heartbeat("quiet", 0)
    code, _ = check(redis_url, namespace, "--action", "resize")
    assert code == 0
    await client.worker.drain("busy")
    code, line = check(redis_url, namespace, "--action", "resize")
    assert (code, line.startswith("unhealthy: worker busy is DRAINING")) == (1, True)


async def test_workers_whose_process_is_gone_fail_an_action_only_when_none_is_left(
    client: FloClient, redis_url: str, namespace: str
) -> None:
    async with FloClient(redis_url, namespace=namespace) as gone:
        await gone.worker.register("w-gone", ["resize"])
    code, line = check(redis_url, namespace, "--action", "resize")
    assert (code, line) == (1, f"unhealthy: no live worker of action 'resize' in namespace "
                               f"'{namespace}': 1 gone (w-gone)")  # fmt: skip
    code, line = check(redis_url, namespace, "--worker", "w-gone")
    assert code == 1 and line.startswith("unhealthy: worker w-gone is gone: no process holds")
    await client.worker.register("w-live", ["resize"])
    code, line = check(redis_url, namespace, "--action", "resize")
    assert (code, line) == (0, f"ok: 1 worker(s) of action 'resize' ACTIVE in namespace "
                               f"'{namespace}'; 1 gone (w-gone)")  # fmt: skip


async def test_an_old_heartbeat_is_unhealthy(
    client: FloClient, redis_url: str, namespace: str
) -> None:
    await client.worker.register("w1", ["resize"])
    code, _ = check(redis_url, namespace, "--worker", "w1", "--max-heartbeat-age", "600")
    assert code == 0
    await eventually(client.server_time_ms, lambda ms: ms > 0)  # some time passes
    code, line = check(redis_url, namespace, "--worker", "w1", "--max-heartbeat-age", "0")
    assert code == 1 and "last heartbeat" in line and "(> 0 s)" in line


def test_unreachable_redis_is_unhealthy() -> None:
    code, line = check("redis://127.0.0.1:1", "default", "--action", "resize")
    assert code == 1 and line.startswith("unhealthy: cannot reach Redis at redis://127.0.0.1:1")


def test_it_needs_a_worker_or_an_action(redis_url: str) -> None:
    code, line = check(redis_url, "default")
    assert code == 2 and "name one of --worker ID or --action NAME" in line
