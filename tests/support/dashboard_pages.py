"""Dashboard pages over HTTP: fetched with a session, read as a browser reads them."""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator
from html.parser import HTMLParser

import aiohttp

from flo_redis import FloClient
from flo_redis.dashboard import RunningDashboard, start_dashboard

TOKEN = "a-long-enough-write-token"  # a write token the dashboards of tests take


def parsed(body: str) -> tuple[set[str], str]:
    """The element names in a page and its text, as a browser reads them."""

    class Reader(HTMLParser):
        def __init__(self) -> None:
            super().__init__()
            self.tags: set[str] = set()
            self.text: list[str] = []

        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            self.tags.add(tag)

        def handle_data(self, data: str) -> None:
            self.text.append(data)

    reader = Reader()
    reader.feed(body)
    return reader.tags, " ".join(reader.text)


async def get(session: aiohttp.ClientSession, url: str) -> tuple[int, str]:
    async with session.get(url) as response:
        return response.status, await response.text()


async def post(
    session: aiohttp.ClientSession, url: str, form: dict[str, str], **headers: str
) -> tuple[int, str]:
    """POST ``form`` as a browser submits it, following the redirect after a change."""
    async with session.post(url, data=form, headers=headers, allow_redirects=True) as response:
        return response.status, await response.text()


async def logged_in(session: aiohttp.ClientSession, base_url: str, token: str) -> str:
    """Log in to the dashboard at ``base_url`` with its write ``token``; the CSRF value
    its forms now carry."""
    status, body = await post(session, base_url + "login", {"token": token, "next": "/"})
    assert status == 200 and "write access" in body
    match = re.search(r'name="csrf" value="([0-9a-f]{64})"', body)
    assert match, body
    return match.group(1)


@contextlib.asynccontextmanager
async def served(client: FloClient, token: str | None = None) -> AsyncIterator[RunningDashboard]:
    """A dashboard of ``client``'s namespace on a free port (read-only without a token),
    closed when the block ends."""
    running = await start_dashboard(client, port=0, token=token)
    try:
        yield running
    finally:
        await running.close()
