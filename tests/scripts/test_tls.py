"""TLS for real: redis-servers with a TLS port and a CA made for the test, reached with
``rediss://`` URLs naming the CA (and a client certificate where the server asks), on a
single node and on a cluster. A server whose certificate the CA did not sign is refused
with a clear typed error, and a password never shows in an error or a log line."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
import redis
from redis_server import RedisServer, redis_cli_binary
from tls_certs import Authority, make_authority, server_args

from flo_redis import ActionContext, ConnectionFailedError, FloClient, RunStatus
from flo_redis.testing import free_port

PASSWORD = "s3cret-Pa55word-never-shown"


@pytest.fixture(scope="module")
def authority(tmp_path_factory: pytest.TempPathFactory) -> Authority:
    return make_authority(tmp_path_factory.mktemp("tls") / "good")


@pytest.fixture(scope="module")
def stranger(tmp_path_factory: pytest.TempPathFactory) -> Authority:
    """Another CA: it signed nothing the servers hold."""
    return make_authority(tmp_path_factory.mktemp("tls") / "other", name="other")


def _tls_server(
    authority: Authority, *, client_certs: bool, password: bool = False
) -> tuple[RedisServer, int]:
    port = free_port()
    server = RedisServer(extra=server_args(authority, port, client_certs=client_certs)).start()
    if password:  # set once it answers (its readiness probe sends no password)
        with redis.Redis(port=server.port) as plain:
            plain.config_set("requirepass", PASSWORD)
    return server, port


@pytest.fixture(scope="module")
def tls_server(authority: Authority) -> Iterator[int]:
    server, port = _tls_server(authority, client_certs=False, password=True)
    try:
        yield port
    finally:
        server.discard()


@pytest.fixture(scope="module")
def mutual_tls_server(authority: Authority) -> Iterator[int]:
    server, port = _tls_server(authority, client_certs=True)
    try:
        yield port
    finally:
        server.discard()


def _url(
    port: int, ca: Path, *, password: str | None = PASSWORD, scheme: str = "rediss", **query: Path
) -> str:
    auth = f":{quote(password)}@" if password else ""
    params = "&".join(f"{k}={v}" for k, v in {"ssl_ca_certs": ca, **query}.items())
    return f"{scheme}://{auth}127.0.0.1:{port}?{params}"


async def _a_run_completes(url: str, namespace: str) -> None:
    async with FloClient(url, namespace=namespace) as client:
        worker = client.new_action_worker(block_ms=500)

        @worker.action("echo")
        async def echo(ctx: ActionContext) -> bytes:
            return ctx.payload

        await client.action.register("echo")
        task = asyncio.create_task(worker.start())  # wake-ups and liveness over TLS too
        run_id = (await client.action.invoke("echo", b"over tls")).run_id
        status = await client.action.wait(run_id, timeout_ms=20_000)
        worker.stop()
        await asyncio.wait_for(task, 30)
    assert (status.status, status.output) == (RunStatus.COMPLETED, b"over tls")


@pytest.mark.slow
async def test_a_worker_runs_over_tls(
    tls_server: int, authority: Authority, namespace: str
) -> None:
    await _a_run_completes(_url(tls_server, authority.ca), namespace)


@pytest.mark.slow
async def test_a_worker_runs_over_tls_with_a_client_certificate(
    mutual_tls_server: int, authority: Authority, namespace: str
) -> None:
    url = _url(
        mutual_tls_server,
        authority.ca,
        password=None,
        ssl_certfile=authority.client_cert,
        ssl_keyfile=authority.client_key,
    )
    await _a_run_completes(url, namespace)


@pytest.mark.slow
async def test_a_server_the_ca_did_not_sign_is_refused_clearly(
    tls_server: int, stranger: Authority, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    with pytest.raises(ConnectionFailedError) as refused:
        await FloClient(_url(tls_server, stranger.ca), debug=True).connect()
    message = str(refused.value)
    assert message.startswith("TLS with Redis at") and "names the CA that signed" in message
    assert PASSWORD not in message and PASSWORD not in caplog.text


async def test_a_missing_client_certificate_is_refused_clearly(
    mutual_tls_server: int, authority: Authority
) -> None:
    with pytest.raises(ConnectionFailedError) as refused:
        await FloClient(_url(mutual_tls_server, authority.ca, password=None)).connect()
    assert "TLS with Redis" in str(refused.value) and "ssl_certfile" in str(refused.value)


@pytest.mark.slow
async def test_passwords_never_show_in_errors_or_logs(
    tls_server: int, authority: Authority, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    wrong = _url(tls_server, authority.ca, password="not-" + PASSWORD)
    with pytest.raises(ConnectionFailedError) as refused:
        await FloClient(wrong, debug=True).connect()
    assert PASSWORD not in str(refused.value) and "not-" + PASSWORD not in str(refused.value)
    async with FloClient(_url(tls_server, authority.ca), namespace=namespace, debug=True) as c:
        await c.action.register("job")
        await c.action.invoke("job", b"")
    unreachable = _url(free_port(), authority.ca)
    with pytest.raises(ConnectionFailedError) as lost:
        await FloClient(unreachable, debug=True).connect()
    assert PASSWORD not in str(lost.value)
    assert PASSWORD not in caplog.text and quote(PASSWORD) not in caplog.text


@pytest.fixture(scope="module")
def tls_cluster(authority: Authority) -> Iterator[list[int]]:
    """Three TLS masters, their bus on TLS too, joined over TLS."""
    servers, ports = [], []
    try:
        for _ in range(3):
            port = free_port()
            extra = (
                *server_args(authority, port, client_certs=False),
                "--tls-cluster", "yes",
                "--cluster-enabled", "yes",
                "--cluster-node-timeout", "5000",
                "--cluster-config-file", "nodes.conf",
                "--cluster-port", str(free_port()),
            )  # fmt: skip
            servers.append(RedisServer(extra=extra).start())
            ports.append(port)
        tls = ["--tls", "--cacert", str(authority.ca)]
        nodes = [f"127.0.0.1:{p}" for p in ports]
        subprocess.run(
            [redis_cli_binary(), *tls, "--cluster", "create", *nodes, "--cluster-replicas", "0",
             "--cluster-yes"], check=True, capture_output=True, timeout=60,
        )  # fmt: skip
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            info = [
                subprocess.run(
                    [redis_cli_binary(), *tls, "-p", str(p), "cluster", "info"],
                    capture_output=True, timeout=10,
                ).stdout.decode()
                for p in ports
            ]  # fmt: skip
            if all("cluster_state:ok" in i for i in info):
                break
            time.sleep(0.1)
        yield ports
    finally:
        for server in servers:
            server.discard()


@pytest.mark.slow
async def test_a_worker_runs_on_a_tls_cluster(
    tls_cluster: list[int], authority: Authority, namespace: str
) -> None:
    url = _url(tls_cluster[0], authority.ca, password=None, scheme="rediss+cluster")
    await _a_run_completes(url, namespace)
