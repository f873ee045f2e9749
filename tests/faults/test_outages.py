"""Redis going away: told once per cause, and once when it is back; typed errors."""

from __future__ import annotations

import asyncio
import logging

import pytest
import redis
from polling import eventually

from flo_redis import ActionContext, ConnectionFailedError, FloClient, FloError, RunStatus
from flo_redis._session import outage as _outage
from flo_redis.sync import SyncFloClient
from flo_redis.testing import RedisServer


async def test_a_six_second_outage_is_a_few_lines_not_one_per_poll(
    caplog: pytest.LogCaptureFixture,
) -> None:
    server = RedisServer(appendonly=True, extra=("--appendfsync", "always")).start()
    try:
        async with FloClient(server.url, namespace="outage") as client:
            worker = client.new_action_worker(block_ms=500)

            @worker.action("job")
            async def job(ctx: ActionContext) -> bytes:
                return b"ok"

            await client.action.register("job")
            task = asyncio.create_task(worker.start())
            first = (await client.action.invoke("job", b"")).run_id
            await client.action.wait(first, timeout_ms=30_000)
            with caplog.at_level(logging.DEBUG, logger="flo_redis"):
                caplog.clear()
                server.stop()
                await asyncio.sleep(6.0)  # the outage itself, not a guess at a deadline
                server.start()
                await eventually(
                    lambda: asyncio.sleep(0, caplog.records),
                    lambda rs: any("reachable again" in r.getMessage() for r in rs),
                    timeout=30,
                )
                # The worker works again.
                await client.reconnect(timeout=10)
                run_id = (await client.action.invoke("job", b"")).run_id
                status = await client.action.wait(run_id, timeout_ms=30_000)
                assert status.status == RunStatus.COMPLETED
            worker.stop()
            await asyncio.wait_for(task, 30)
        records = [r for r in caplog.records if r.name.startswith("flo_redis")]
        warnings = [r for r in records if r.levelno >= logging.WARNING]
        back = [r for r in records if "reachable again" in r.getMessage()]
        debug = [r for r in records if r.levelno == logging.DEBUG]
        # Dozens of failed calls, told as one warning per cause (the connection closed,
        # then refused) and one line when Redis is back.
        assert 1 <= len(warnings) <= 4, [r.getMessage() for r in warnings]
        assert all("unreachable" in r.getMessage() for r in warnings)
        assert len(back) == 1 and back[0].levelno == logging.INFO
        assert len(debug) >= 5  # the repeats are still there for whoever asks
    finally:
        server.discard()


async def test_an_http_server_at_the_url_is_a_typed_error() -> None:
    async def http(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(100)
        writer.write(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(http, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        with pytest.raises(ConnectionFailedError, match="is not a Redis server"):
            async with FloClient(f"redis://127.0.0.1:{port}"):
                pass
        with SyncFloClient(f"redis://127.0.0.1:{port}") as flo, pytest.raises(FloError):
            await asyncio.to_thread(flo.action.status, "resize:1")
    finally:
        server.close()
        await server.wait_closed()


def test_a_connection_left_from_an_outage_failing_once_more_is_not_a_new_outage(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = logging.getLogger("flo_redis.test")
    where = "10.255.0.1:6399"  # this test's own address: outages are kept per address
    closed = redis.exceptions.ConnectionError("Connection closed by server.")
    refused = redis.exceptions.ConnectionError("Error 111 connecting to 10.255.0.1:6399.")

    def lines() -> list[tuple[int, str]]:
        told = [(r.levelno, r.getMessage()) for r in caplog.records]
        caplog.clear()
        return told

    with caplog.at_level(logging.DEBUG, logger="flo_redis.test"):
        _outage.failed(log, where, "poll", closed)
        _outage.reached(log, where)
        assert [level for level, _ in lines()] == [logging.WARNING, logging.INFO]
        # Just after it is back, an idle pooled connection fails once with the cause
        # the outage had: part of that outage, so no warning and no second "back".
        _outage.failed(log, where, "reclaim", closed)
        _outage.reached(log, where)
        told = lines()
        assert [level for level, _ in told] == [logging.DEBUG]
        assert "left from the outage" in told[0][1]
        assert not _outage.down(where)
        # A cause the outage did not have is a new outage, told as one.
        _outage.failed(log, where, "poll", refused)
        _outage.reached(log, where)
        assert [level for level, _ in lines()] == [logging.WARNING, logging.INFO]
        # So is the same cause once the outage's tail is over.
        monkeypatch.setattr(_outage, "SETTLE_S", 0.0)
        _outage.failed(log, where, "poll", closed)
        assert _outage.down(where)
        _outage.reached(log, where)
        assert [level for level, _ in lines()] == [logging.WARNING, logging.INFO]
