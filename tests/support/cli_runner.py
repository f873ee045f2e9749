"""The command line in the test's own process: ``flo-redis ARGS`` through click's runner,
and a client for one piece of async work from a synchronous test."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from click.testing import CliRunner, Result

from flo_redis import FloClient
from flo_redis.cli import main

T = TypeVar("T")


def with_client(url: str, namespace: str, work: Callable[[FloClient], Awaitable[T]]) -> T:
    async def go() -> T:
        async with FloClient(url, namespace=namespace) as client:
            return await work(client)

    return asyncio.run(go())


def cli(url: str, namespace: str, *args: str, input: str | None = None) -> Result:
    """``flo-redis ARGS --url URL --namespace NS`` through click's runner on ``main``."""
    argv = [*args, "--url", url, "--namespace", namespace]
    return CliRunner().invoke(main, argv, input=input, catch_exceptions=False)
