"""FloClient: endpoints, credentials, connection errors, restarts, namespaces, interrupt."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from urllib.parse import urlsplit

import pytest
import redis.asyncio as aioredis
from polling import watched
from redis_server import RedisServer, free_port

import flo_redis
from flo_redis import (
    ActionInvokeOptions,
    ActionRegisterOptions,
    ConnectionFailedError,
    FloClient,
    InvalidEndpointError,
    NotConnectedError,
    NotFoundError,
    RedisVersionError,
    RunStatus,
    WorkerAwaitOptions,
    is_connection_error,
)
from flo_redis._session.endpoint import MIN_REDIS, normalize_endpoint
from flo_redis._session.endpoint import version_tuple as _version_tuple
from flo_redis._wire.keys import action_keys
from flo_redis.sync import SyncFloClient


@pytest.fixture
def server() -> Iterator[RedisServer]:
    """A private Redis for tests that stop, restart or reconfigure it."""
    srv = RedisServer(appendonly=True).start()
    try:
        yield srv
    finally:
        srv.stop()


async def roundtrip(client: FloClient) -> None:
    await client.action.register("ping")
    run_id = (await client.action.invoke("ping", b"x")).run_id
    assert (await client.action.status(run_id)).status == RunStatus.PENDING


# --- endpoints --------------------------------------------------------------------


async def test_redis_url(redis_url: str, namespace: str) -> None:
    async with FloClient(redis_url, namespace=namespace) as client:
        assert client.is_connected
        await roundtrip(client)


async def test_bare_host_port(redis_url: str, namespace: str) -> None:
    host_port = redis_url.split("://", 1)[1].rsplit("@", 1)[-1]
    assert normalize_endpoint(host_port) == f"redis://{host_port}"
    if "/" in host_port:
        pytest.skip("FLO_REDIS_TEST_URL names a database; bare host:port cannot")
    async with FloClient(host_port, namespace=namespace) as client:
        await roundtrip(client)


async def test_unix_socket(namespace: str) -> None:
    srv = RedisServer()
    socket_path = srv.workdir / "redis.sock"
    srv.extra = ("--unixsocket", str(socket_path), "--unixsocketperm", "700")
    srv.start()
    try:
        async with FloClient(f"unix://{socket_path}", namespace=namespace) as client:
            await roundtrip(client)
    finally:
        srv.stop()


async def test_acl_user_and_password(server: RedisServer, namespace: str) -> None:
    admin = aioredis.Redis(port=server.port)
    await admin.execute_command("ACL", "SETUSER", "flo", "on", ">s3cret", "~*", "&*", "+@all")
    await admin.aclose()
    url = f"redis://flo:s3cret@127.0.0.1:{server.port}"
    async with FloClient(url, namespace=namespace) as client:
        await roundtrip(client)
    wrong = FloClient(f"redis://flo:wrong@127.0.0.1:{server.port}", namespace=namespace)
    with pytest.raises(ConnectionFailedError) as info:
        await wrong.connect()
    assert "wrong" not in str(info.value)  # the password is not echoed
    assert not wrong.is_connected


@pytest.mark.parametrize(
    "endpoint",
    [
        "http://localhost:6379",
        "",
        "   ",
        "redis://localhost:notaport",
        "unix://",
        "redis://localhost:6379/abc",  # the path names a database, a number
        "redis+cluster://localhost:7000/x1",
    ],
)
def test_bad_endpoints(endpoint: str) -> None:
    with pytest.raises(InvalidEndpointError):
        FloClient(endpoint)


async def test_unreachable_redis_says_how_to_start_one() -> None:
    client = FloClient(f"redis://127.0.0.1:{free_port()}", timeout_ms=2000)
    with pytest.raises(ConnectionFailedError) as info:
        await client.connect()
    message = str(info.value)
    assert "redis-server" in message and "docker compose" in message
    assert not client.is_connected


# --- server version ---------------------------------------------------------------


def test_version_parsing() -> None:
    assert _version_tuple("7.0.15") == (7, 0)
    assert _version_tuple("7.2.4") == (7, 2)
    assert _version_tuple("8") == (8, 0)
    assert _version_tuple("6.2.14") == (6, 2)
    assert _version_tuple("garbage") == (0, 0)
    assert MIN_REDIS == (7, 0)
    assert _version_tuple("6.2.14") < MIN_REDIS <= _version_tuple("7.0.0")


@contextlib.asynccontextmanager
async def old_redis(version: str) -> AsyncIterator[int]:
    """A listener that answers the connection handshake like a Redis of ``version``."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                line = await reader.readline()
                if not line:
                    return
                if not line.startswith(b"*"):
                    continue
                parts = []
                for _ in range(int(line[1:])):
                    await reader.readline()  # $len
                    parts.append((await reader.readline()).strip())
                if parts and parts[0].upper() == b"HELLO":  # RESP3 asked for: a map
                    proto = int(parts[1]) if len(parts) > 1 else 2
                    writer.write(b"%%1\r\n$5\r\nproto\r\n:%d\r\n" % proto)
                elif parts and parts[0].upper() == b"INFO":
                    body = f"# Server\r\nredis_version:{version}\r\n".encode()
                    writer.write(b"$%d\r\n%s\r\n" % (len(body), body))
                else:
                    writer.write(b"+OK\r\n")
                await writer.drain()
        finally:
            writer.close()

    listener = await asyncio.start_server(serve, "127.0.0.1", 0)
    try:
        yield listener.sockets[0].getsockname()[1]
    finally:
        listener.close()
        await listener.wait_closed()


async def test_a_database_the_server_does_not_have_is_named_as_such(redis_url: str) -> None:
    parts = urlsplit(redis_url)
    client = FloClient(f"{parts.scheme}://{parts.netloc}/999")
    with pytest.raises(ConnectionFailedError, match="no database of the number in the URL"):
        await client.connect()
    assert not client.is_connected


async def test_a_redis_older_than_7_is_refused() -> None:
    async with old_redis("6.2.14") as port:
        client = FloClient(f"redis://127.0.0.1:{port}")
        with pytest.raises(RedisVersionError) as info:
            await client.connect()
        assert "6.2.14" in str(info.value)
        assert isinstance(info.value, ConnectionFailedError)
        assert not client.is_connected


async def test_the_blocking_client_refuses_a_redis_older_than_7_before_its_first_call() -> None:
    async with old_redis("6.2.14") as port:

        def invoke() -> RedisVersionError:
            with SyncFloClient(f"redis://127.0.0.1:{port}") as flo:
                with pytest.raises(RedisVersionError) as info:
                    flo.action.invoke("job", b"{}")
                return info.value

        refused = await asyncio.to_thread(invoke)
    assert "6.2.14" in str(refused)


# --- lifecycle --------------------------------------------------------------------


async def test_namespace_property_and_isolation(redis_url: str, namespace: str) -> None:
    async with (
        FloClient(redis_url, namespace=namespace) as a,
        FloClient(redis_url, namespace=f"{namespace}-b") as b,
    ):
        assert a.namespace == namespace
        assert a.get_namespace(None) == namespace
        assert a.get_namespace("x") == "x"
        await a.action.register("job")
        with pytest.raises(NotFoundError):
            await b.action.invoke("job", b"x")
        run_id = (
            await b.action.invoke("job", b"x", ActionInvokeOptions(namespace=namespace))
        ).run_id
        assert (await a.action.status(run_id)).status == RunStatus.PENDING
        assert [x.name for x in (await a.action.list()).actions] == ["job"]
        assert (await b.action.list()).actions == []


async def test_calls_before_connect_and_after_close(redis_url: str) -> None:
    client = FloClient(redis_url)
    assert not client.is_connected
    with pytest.raises(NotConnectedError):
        await client.action.register("job")
    with pytest.raises(NotConnectedError):
        await client.worker.await_task("w1", ["job"])
    assert await client.connect() is client
    assert await client.connect() is client  # connecting twice is harmless
    await client.close()
    await client.close()
    assert not client.is_connected
    with pytest.raises(NotConnectedError):
        await client.action.invoke("job", b"x")


async def test_async_with_connects_and_closes(redis_url: str) -> None:
    async with FloClient(redis_url) as client:
        assert client.is_connected
    assert not client.is_connected


@pytest.mark.slow
async def test_redis_down_is_a_connection_error_then_reconnect_works(
    server: RedisServer, namespace: str
) -> None:
    async with FloClient(server.url, namespace=namespace, timeout_ms=2000) as client:
        await client.action.register("job", options=ActionRegisterOptions(max_retries=2))
        run_id = (await client.action.invoke("job", b"x")).run_id

        server.stop()
        with pytest.raises(flo_redis.FloError) as info:
            await client.action.status(run_id)
        assert is_connection_error(info.value)
        with pytest.raises(flo_redis.FloError) as info:
            await client.worker.await_task("w1", ["job"], WorkerAwaitOptions(block_ms=0))
        assert is_connection_error(info.value)

        server.start()  # same port, data from the append-only file
        await client.reconnect(timeout=30)
        assert client.is_connected
        assert (await client.action.status(run_id)).status == RunStatus.PENDING
        await client.worker.register("w1", ["job"])
        task = (await client.worker.await_task("w1", ["job"], WorkerAwaitOptions(block_ms=0))).task
        assert task is not None and task.task_id == run_id


async def test_long_poll_survives_a_restart(server: RedisServer, namespace: str) -> None:
    async with FloClient(server.url, namespace=namespace, timeout_ms=2000) as client:
        await client.action.register("job")
        await client.worker.register("w1", ["job"])
        server.restart()
        await client.reconnect(timeout=30)
        poll = asyncio.create_task(
            client.worker.await_task("w1", ["job"], WorkerAwaitOptions(block_ms=20_000))
        )
        async with aioredis.Redis.from_url(server.url) as raw:
            await watched(raw, action_keys(namespace, "job").wake)
        run_id = (await client.action.invoke("job", b"x")).run_id
        task = (await asyncio.wait_for(poll, 30)).task
        assert task is not None and task.task_id == run_id


@pytest.mark.slow
async def test_reconnect_gives_up_after_its_timeout() -> None:
    client = FloClient(f"redis://127.0.0.1:{free_port()}", timeout_ms=500)
    with pytest.raises(ConnectionFailedError):
        await client.reconnect(timeout=0.5)


async def test_interrupt_wakes_a_waiting_await_task(client: FloClient, raw: aioredis.Redis) -> None:
    await client.action.register("job")
    await client.worker.register("w1", ["job"])
    poll = asyncio.create_task(
        client.worker.await_task("w1", ["job"], WorkerAwaitOptions(block_ms=60_000))
    )
    await watched(raw, action_keys(client.namespace, "job").wake)
    assert not poll.done()
    client.interrupt()
    result = await asyncio.wait_for(poll, 30)  # woken well before its 60 s
    assert result.task is None
    # The client stays usable: the next poll waits and gets work as usual.
    run_id = (await client.action.invoke("job", b"x")).run_id
    task = (await client.worker.await_task("w1", ["job"], WorkerAwaitOptions(block_ms=5000))).task
    assert task is not None and task.task_id == run_id


def test_interrupt_without_a_connection_is_harmless(redis_url: str) -> None:
    FloClient(redis_url).interrupt()
