"""Shared fixtures: one private Redis per test session, a fresh namespace per test."""

from __future__ import annotations

import os
import shutil
import sys
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
from cli_command import Command
from dashboard_pages import TOKEN as DASHBOARD_TOKEN
from dashboard_pages import served
from proxy import Proxy, proxying
from redis.asyncio.cluster import RedisCluster as ClusterClient
from redis_server import RedisCluster, RedisServer, cluster_client, discard_all
from slowlog import slowlog_server

from flo_redis import FloClient

# Tests touch only servers they start. Redis's default port on this machine (the one
# the README's examples and the CLI default to) may be a developer's own Redis: a
# connection to it from the test process is refused before anything is sent, and fails
# the test that made it (unless FLO_REDIS_TEST_URL names that port itself).
DEFAULT_PORT = 6379
_LOOPBACK = ("127.", "::1", "localhost", "0.0.0.0", "::ffff:127.")
_reached_default: list[str] = []


def _refuse_the_default_port(event: str, args: tuple[object, ...]) -> None:
    if event != "socket.connect":
        return
    address = args[1]
    if isinstance(address, tuple) and len(address) >= 2 and address[1] == DEFAULT_PORT:
        host = str(address[0])
        if host.startswith(_LOOPBACK):
            _reached_default.append(host)
            raise ConnectionRefusedError(
                f"a test connected to {host}:{DEFAULT_PORT}, a server the tests did not start"
            )


def _test_urls_use_the_default_port() -> bool:
    urls = (os.environ.get(n, "") for n in ("FLO_REDIS_TEST_URL", "FLO_REDIS_TEST_CLUSTER_URL"))
    return any(f":{DEFAULT_PORT}" in url for url in urls)


if not _test_urls_use_the_default_port():
    sys.addaudithook(_refuse_the_default_port)


@pytest.fixture(autouse=True)
def _only_servers_the_tests_started() -> Iterator[None]:
    """Fail a test that reached Redis's default port on this machine."""
    before = len(_reached_default)
    yield
    if len(_reached_default) > before:
        pytest.fail(
            f"the test connected to {_reached_default[before]}:{DEFAULT_PORT}, a server the "
            "tests did not start; give it the URL of its own (the redis_url fixture)"
        )


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """FLO_REDIS_TEST_URL if set, else a private redis-server on a free port."""
    url = os.environ.get("FLO_REDIS_TEST_URL")
    if url:
        yield url
        return
    server = RedisServer().start()
    try:
        yield server.url
    finally:
        server.discard()


# Markers by layer: fault tests (outages, kills, soaks), command-line tests (mostly
# subprocesses) and browser tests take seconds each: slow. Every test that starts or
# reaches a Redis Cluster is a cluster test, wherever it lives. Single tests elsewhere
# carry their own mark. ``pytest -m "not slow and not cluster"`` is the fast subset
# (tests/README.md).
_FOLDER_MARKS = {"faults": "slow", "cli": "slow", "browser": "slow", "cluster": "cluster"}
_TESTS = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        folder = item.path.relative_to(_TESTS).parts[0] if _TESTS in item.path.parents else ""
        if folder in _FOLDER_MARKS:
            item.add_marker(_FOLDER_MARKS[folder])
        if "cluster_url" in getattr(item, "fixturenames", ()):
            item.add_marker("cluster")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Stop any server a test left running and remove every server's data folder."""
    discard_all()


@pytest.fixture(scope="module")
def server() -> Iterator[RedisServer]:
    """A redis-server of the test module's own (its ACL users, its command counts)."""
    running = RedisServer().start()
    try:
        yield running
    finally:
        running.discard()


@pytest.fixture(scope="session", autouse=True)
def _remove_tmp_paths(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[None]:
    """Remove this run's own tmp_path folder when it ends (only this run's: other runs
    on the same machine keep theirs), unless --basetemp named one to keep."""
    yield
    if request.config.option.basetemp is None:
        shutil.rmtree(tmp_path_factory.getbasetemp(), ignore_errors=True)


@pytest.fixture
def namespace() -> str:
    """A namespace no other test uses, so tests never see each other's keys."""
    return f"t-{uuid.uuid4().hex[:12]}"


@pytest.fixture
async def client(redis_url: str, namespace: str) -> AsyncIterator[FloClient]:
    async with FloClient(redis_url, namespace=namespace) as c:
        yield c


@pytest.fixture(scope="module")
def slowlog_url() -> Iterator[str]:
    """A server of the module's own whose SLOWLOG lists every call over 50 ms
    (tests/support/slowlog.py)."""
    with slowlog_server() as url:
        yield url


@pytest.fixture
async def proxy(redis_url: str) -> AsyncIterator[Proxy]:
    """A proxy to the test Redis (tests/support/proxy.py: cut, silence or answer for it)."""
    async with proxying(redis_url) as running:
        yield running


@pytest.fixture
async def raw(redis_url: str) -> AsyncIterator[aioredis.Redis]:
    """A plain redis-py connection to the same server, for looking behind the API."""
    conn = aioredis.Redis.from_url(redis_url)
    try:
        yield conn
    finally:
        await conn.aclose()


@pytest.fixture(scope="session")
def cluster_url() -> Iterator[str]:
    """FLO_REDIS_TEST_CLUSTER_URL if set, else a private 3-master Redis Cluster.

    When the cluster is private, ``cluster_nodes`` gives its process handles (for
    resharding and ``SCRIPT FLUSH`` on every node)."""
    url = os.environ.get("FLO_REDIS_TEST_CLUSTER_URL")
    if url:
        yield url
        return
    cluster = RedisCluster(masters=3).start()
    _CLUSTERS.append(cluster)
    try:
        yield cluster.url
    finally:
        _CLUSTERS.remove(cluster)
        cluster.stop()


_CLUSTERS: list[RedisCluster] = []


@pytest.fixture
async def cclient(cluster_url: str, namespace: str) -> AsyncIterator[FloClient]:
    """A client of a namespace of its own on the test cluster."""
    async with FloClient(cluster_url, namespace=namespace) as c:
        yield c


@pytest.fixture
async def craw(cluster_url: str) -> AsyncIterator[ClusterClient]:
    """A plain cluster client of the test cluster, to look at keys directly."""
    conn = cluster_client(cluster_url)
    try:
        yield conn
    finally:
        await conn.aclose()


@pytest.fixture
def cluster_nodes(cluster_url: str) -> RedisCluster:
    """The private cluster behind ``cluster_url`` (skips when it is an external one)."""
    if not _CLUSTERS:
        pytest.skip("FLO_REDIS_TEST_CLUSTER_URL names an external cluster")
    return _CLUSTERS[0]


@pytest.fixture
def command(redis_url: str) -> Iterator[Callable[..., Command]]:
    """Start ``flo-redis ARGS`` (env added to the test's own); killed after the test."""
    started: list[Command] = []

    def run(*args: str, env: dict[str, str] | None = None) -> Command:
        cmd = Command(list(args), {"CLI_APP_URL": redis_url, **(env or {})})
        started.append(cmd)
        return cmd

    yield run
    for cmd in started:
        cmd.close()


@pytest.fixture
async def read_only(client: FloClient) -> AsyncIterator[Any]:
    """A dashboard of the test's namespace, started without a write token."""
    async with served(client) as running:
        yield running


@pytest.fixture
async def writable(client: FloClient) -> AsyncIterator[Any]:
    """A dashboard of the test's namespace that takes changes with ``TOKEN``."""
    async with served(client, DASHBOARD_TOKEN) as running:
        yield running
