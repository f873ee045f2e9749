"""A page cursor is read strictly wherever one comes in: the client, the ``flo-redis``
command and the dashboard. A cursor a page returned reads the next page; anything else
(``nan``, ``inf``, an exponent, underscores, text) is a typed refusal, a usage error or
a 400 page, never a Lua or Redis error."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlencode

import aiohttp
import pytest

from flo_redis import FloClient, RunState, ValidationError
from flo_redis.dashboard import start_dashboard

FLO_REDIS = str(Path(sys.executable).with_name("flo-redis"))
BAD = ["nan job:1", "inf job:1", "-inf job:1", "1e3 job:1", "1_000 job:1", "abc job:1",
       "1.5 job:1", " 5 job:1", "9007199254740993 job:1", "5", "5 ", "0x10 job:1"]  # fmt: skip


async def three_runs(client: FloClient) -> list[str]:
    await client.action.register("job")
    return [(await client.action.invoke("job", b"x")).run_id for _ in range(3)]


async def test_a_cursor_a_page_returned_reads_the_next(client: FloClient) -> None:
    ids = await three_runs(client)
    first = await client.action.runs("job", RunState.PENDING, limit=2)
    assert first.cursor is not None
    rest = await client.action.runs("job", RunState.PENDING, limit=2, cursor=first.cursor)
    assert [r.run_id for r in first.runs + rest.runs] == ids


@pytest.mark.parametrize("cursor", BAD)
async def test_the_client_refuses_a_cursor_no_page_wrote(client: FloClient, cursor: str) -> None:
    await three_runs(client)
    with pytest.raises(ValidationError, match=r"cursor .* is malformed"):
        await client.action.runs("job", RunState.PENDING, cursor=cursor.encode())


@pytest.mark.parametrize("cursor", ["nan job:1", "inf job:1", "1_0 job:1"])
@pytest.mark.slow
async def test_the_command_refuses_it_as_a_usage_error(
    client: FloClient, redis_url: str, cursor: str
) -> None:
    await three_runs(client)
    args = ["runs", "list", "job", "--cursor", cursor]
    done = await asyncio.to_thread(
        subprocess.run,
        [FLO_REDIS, *args, "--url", redis_url, "--namespace", client.namespace],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "malformed" in done.stderr and "Traceback" not in done.stderr


async def test_the_dashboard_answers_400_for_it(client: FloClient) -> None:
    await three_runs(client)
    dash = await start_dashboard(client, port=0)
    try:
        async with aiohttp.ClientSession() as session:
            good = await client.action.runs("job", RunState.PENDING, limit=1)
            assert good.cursor is not None
            query = {"name": "job", "state": "pending", "cursor": good.cursor.decode()}
            async with session.get(f"{dash.url}action?{urlencode(query)}") as answer:
                assert answer.status == 200
            for cursor in ["nan job:1", "inf job:1", "1e300 job:1"]:
                query["cursor"] = cursor
                async with session.get(f"{dash.url}action?{urlencode(query)}") as answer:
                    body = await answer.text()
                    assert answer.status == 400, body
                    assert "malformed" in body and "user_function" not in body
    finally:
        await dash.close()
