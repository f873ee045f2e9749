"""flo_redis.testing.RedisServer, as users' own tests use it: a server that starts, stops
and restarts cleanly, and a start that fails says why and leaves nothing running."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import redis
from redis_server import redis_server_binary

from flo_redis import testing
from flo_redis.testing import RedisServer


def _fake_server(folder: Path, body: str) -> str:
    """An executable standing in for a server binary that misbehaves."""
    path = folder / "fake-server"
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def _gone(process: subprocess.Popen[bytes]) -> bool:
    return process.poll() is not None


def test_stop_ends_the_process_and_closes_its_pipe() -> None:
    server = RedisServer(binary=redis_server_binary()).start()
    try:
        process = server.process
        assert process is not None
        redis.Redis.from_url(server.url).set("k", "v")
        server.stop()
        assert server.process is None
        assert _gone(process)
        assert process.stderr is not None and process.stderr.closed
        server.stop()  # a second stop is a no-op
    finally:
        server.discard()


@pytest.mark.slow
def test_a_restart_keeps_the_appendonly_data() -> None:
    server = RedisServer(binary=redis_server_binary(), appendonly=True).start()
    try:
        redis.Redis.from_url(server.url).set("k", "v")
        first = server.process
        server.restart()
        assert first is not None and _gone(first) and first.stderr is not None
        assert first.stderr.closed
        assert redis.Redis.from_url(server.url).get("k") == b"v"
    finally:
        server.discard()
    assert not server.workdir.exists()


def test_a_server_that_exits_at_start_says_what_it_printed(tmp_path: Path) -> None:
    binary = _fake_server(tmp_path, "echo 'Fatal: bad config' >&2; exit 1")
    server = RedisServer(binary=binary)
    try:
        with pytest.raises(RuntimeError, match="exited at start: Fatal: bad config"):
            server.start()
        assert server.process is None
    finally:
        server.discard()


@pytest.mark.slow
def test_a_server_that_never_answers_is_stopped_when_start_gives_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pid_file = tmp_path / "pid"
    binary = _fake_server(tmp_path, f"echo $$ > {pid_file}; exec sleep 60")
    monkeypatch.setattr(testing, "START_TIMEOUT_S", 0.5)
    server = RedisServer(binary=binary)
    try:
        with pytest.raises(RuntimeError, match=r"did not answer PING within 0.5 s; its log: "):
            server.start()
        assert server.process is None
        pid = int(pid_file.read_text())
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)  # killed and reaped: no such process
    finally:
        server.discard()


def test_a_port_another_server_listens_on_fails_the_start_rather_than_answering_for_it() -> None:
    """The other server answers PING on the port at once; the start waits for its own
    process to answer, and fails with the server's own words when it cannot bind."""
    first = RedisServer(binary=redis_server_binary()).start()
    second = RedisServer(binary=redis_server_binary(), port=first.port)
    try:
        with pytest.raises(RuntimeError, match=r"exited at start: (.|\n)*Address already in use"):
            second.start()
        assert second.process is None
        assert first.process is not None
        info = redis.Redis.from_url(first.url).info("server")
        assert info["process_id"] == first.process.pid
    finally:
        second.discard()
        first.discard()


def test_a_port_handed_out_here_is_not_handed_to_another_process() -> None:
    """Two test processes starting servers side by side never share a port, even while
    one of them has its server stopped for a restart."""
    port = testing.free_port()
    probe = f"from flo_redis.testing import _hold; print(_hold({port}))"
    elsewhere = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert elsewhere.stdout.split() == ["False"], elsewhere.stderr
