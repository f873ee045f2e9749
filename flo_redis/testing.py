"""A private ``redis-server`` on a free port: for tests, benchmarks and demos.

    server = RedisServer().start()      # or RedisServer(appendonly=True) to survive restarts
    client = FloClient(server.url)
    ...
    server.stop()

No fakes: it runs the real ``redis-server`` found on the PATH, with no snapshots, its data
in a temporary folder, bound to 127.0.0.1.
"""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

START_TIMEOUT_S = 10.0


class RedisServerNotFound(FileNotFoundError):
    """``redis-server`` is not on the PATH."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def redis_server_path() -> str:
    """The ``redis-server`` binary; :class:`RedisServerNotFound` says how to install it."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise RedisServerNotFound(
            "redis-server is not on the PATH; install it (apt-get install -y redis-server, "
            "brew install redis) or point the URL at a running Redis 7+"
        )
    return binary


@dataclass
class RedisServer:
    """A private redis-server on a free port; restartable, with optional AOF."""

    port: int = field(default_factory=free_port)
    appendonly: bool = False
    extra: tuple[str, ...] = ()
    workdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="flo-redis-")))
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    def start(self) -> RedisServer:
        """Start it and wait until it answers PING; RuntimeError if it does not."""
        args = [
            redis_server_path(),
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--save", "",
            "--appendonly", "yes" if self.appendonly else "no",
            "--dir", str(self.workdir),
            "--logfile", str(self.workdir / "redis.log"),
            *self.extra,
        ]  # fmt: skip
        self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                err = self.process.stderr.read().decode() if self.process.stderr else ""
                raise RuntimeError(f"redis-server exited at start: {err}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(64).startswith(b"+PONG"):
                        return self
            except OSError:
                pass
            time.sleep(0.02)
        raise RuntimeError(f"redis-server on port {self.port} did not start in 10 s")

    def stop(self, sig: int = signal.SIGTERM) -> None:
        """Stop the process (its data folder stays, so :meth:`start` can resume it)."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        self.process = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def discard(self) -> None:
        """Stop it and remove its data folder."""
        self.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)
