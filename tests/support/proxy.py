"""A small asyncio TCP proxy for fault tests: sits between clients and Redis and can cut
every connection, silence them (a partition, or a half-open connection that keeps
every connection it makes open and silent), or let a request through and drop its reply
(cutting that connection), so a test can make Redis run a command whose answer never
arrives, or answer requests itself with ``-LOADING`` as a Redis loading its data set does
(the request never reaches Redis). With a ``lag_s``, every byte from upstream reaches its
client that late: a replica replicating through it trails its primary by the lag."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import redis.asyncio as aioredis
import redis.exceptions as rex

from flo_redis._wire.runner import LIBRARY, SCRIPTS


@dataclass(eq=False)
class _Link:
    client: asyncio.StreamWriter
    server: asyncio.StreamWriter
    drop_next_reply: bool = False
    stalled: bool = False
    #: Replies held back by a lag: when each is due, and its bytes.
    held: asyncio.Queue[tuple[float, bytes]] = field(default_factory=asyncio.Queue)
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    #: The task delivering held replies (with a lag): it ends with the link.
    late: asyncio.Task[None] | None = None

    def close(self) -> None:
        if self.late is not None:
            self.late.cancel()
        for writer in (self.client, self.server):
            with contextlib.suppress(Exception):
                writer.close()


class Proxy:
    """Forward ``127.0.0.1:<port>`` to ``upstream``; ``url`` is the Redis URL to use.

    ``lag_s``: every reply is delivered that long after it arrived, in order. When a
    connection closes, the replies it still holds are never delivered: a primary
    replicating through the proxy that dies (or is cut off) takes its last ``lag_s`` of
    writes with it, as when the replica trails by that much across a network.
    """

    def __init__(self, upstream_host: str, upstream_port: int, lag_s: float = 0.0) -> None:
        self._upstream = (upstream_host, upstream_port)
        self.lag_s = lag_s
        self._server: asyncio.Server | None = None
        self._links: set[_Link] = set()
        self._drop_after: bytes | None = None
        self.dropped_replies = 0
        self._loading_marker: bytes | None = None
        self._loading_left = 0
        self.loading_answers = 0
        self.forwarded: list[bytes] = []
        self.accepted = 0
        self.port = 0
        self.refusing = False
        self.silencing = False

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    @classmethod
    async def to(cls, redis_url: str) -> Proxy:
        """A started proxy to the Redis at ``redis_url``, which has every script loaded
        (as functions and by SHA): a call through the proxy is never a load, whose text
        (a ``FUNCTION LOAD`` names every script's SHA) a request marker would match."""
        async with aioredis.Redis.from_url(redis_url) as conn:
            with contextlib.suppress(rex.ResponseError):  # it is loaded already
                await conn.function_load(LIBRARY.source)
            for script in SCRIPTS.values():
                await conn.script_load(script.source)
        parts = urlsplit(redis_url)
        return await cls(parts.hostname or "127.0.0.1", parts.port or 6379).start()

    async def start(self) -> Proxy:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        self.cut_all()
        tasks = [t for link in self._links for t in link.tasks]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    def cut_all(self) -> None:
        """Close every connection now (both directions)."""
        for link in list(self._links):
            link.close()

    def blackout(self) -> None:
        """Cut every connection and refuse new ones (each is closed at once) until
        :meth:`restore`: Redis is unreachable, as during a restart or a network outage."""
        self.refusing = True
        self.cut_all()

    def retarget(self, host: str, port: int) -> None:
        """New connections go to ``host:port`` from now on; those made before stay where
        they are, as a managed Redis's address moved to a promoted replica leaves them."""
        self._upstream = (host, port)

    def restore(self) -> None:
        """End a :meth:`blackout`: new connections reach Redis again."""
        self.refusing = False

    def stall_all(self) -> None:
        """Silence every current connection, as a network partition would: bytes are
        swallowed in both directions and nobody is told (new connections still work)."""
        for link in self._links:
            link.stalled = True

    def silence(self) -> None:
        """Silence every connection, those made from now on too: each stays open, and
        every byte either way is swallowed, as behind a network cut Redis has not
        noticed (a half-open connection). Redis keeps counting the clients' subscriptions.
        """
        self.silencing = True
        self.stall_all()

    def drop_reply_after(self, request_marker: bytes) -> None:
        """The next request containing ``request_marker`` reaches Redis, but its reply is
        dropped and that connection is cut: the command ran, its answer is lost."""
        self._drop_after = request_marker

    def answer_loading(self, request_marker: bytes, times: int) -> None:
        """The next ``times`` requests containing ``request_marker`` are answered
        ``-LOADING`` by the proxy and never reach Redis (one request per read assumed)."""
        self._loading_marker = request_marker
        self._loading_left = times

    def forwarded_count(self, request_marker: bytes) -> int:
        """How many forwarded requests contained ``request_marker``."""
        return sum(1 for data in self.forwarded if request_marker in data)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.refusing:
            writer.close()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self._upstream)
        except OSError:
            writer.close()
            return
        link = _Link(client=writer, server=up_writer, stalled=self.silencing)
        self._links.add(link)
        self.accepted += 1
        link.tasks = [
            asyncio.create_task(self._pump_requests(link, reader, up_writer)),
            asyncio.create_task(self._pump_replies(link, up_reader, writer)),
        ]
        if self.lag_s:
            link.late = asyncio.create_task(self._deliver_late(link, writer))

    async def _pump_requests(
        self, link: _Link, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        try:
            while data := await reader.read(65536):
                loading = self._loading_marker
                if loading is not None and self._loading_left > 0 and loading in data:
                    self._loading_left -= 1
                    self.loading_answers += 1
                    link.client.write(b"-LOADING Redis is loading the dataset in memory\r\n")
                    await link.client.drain()
                    continue
                self.forwarded.append(data)
                marker = self._drop_after
                if marker is not None and marker in data:
                    self._drop_after = None
                    link.drop_next_reply = True
                if link.stalled:
                    continue
                writer.write(data)
                await writer.drain()
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            link.close()
            self._links.discard(link)

    async def _pump_replies(
        self, link: _Link, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        try:
            while data := await reader.read(65536):
                if link.drop_next_reply:
                    self.dropped_replies += 1
                    break
                if link.stalled:
                    continue
                if self.lag_s:
                    link.held.put_nowait((asyncio.get_running_loop().time() + self.lag_s, data))
                    continue
                writer.write(data)
                await writer.drain()
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            link.close()
            self._links.discard(link)

    async def _deliver_late(self, link: _Link, writer: asyncio.StreamWriter) -> None:
        """Write each held reply once it is due; none once the link is closed."""
        loop = asyncio.get_running_loop()
        try:
            while True:
                due, data = await link.held.get()
                await asyncio.sleep(due - loop.time())
                writer.write(data)
                await writer.drain()
        except OSError:
            link.close()


@contextlib.asynccontextmanager
async def proxying(redis_url: str) -> AsyncIterator[Proxy]:
    """A proxy to the Redis at ``redis_url`` for the block, stopped after it."""
    proxy = await Proxy.to(redis_url)
    try:
        yield proxy
    finally:
        await proxy.stop()
