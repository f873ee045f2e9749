"""Real ``redis-server`` processes for the tests: started on free ports, stopped after.

No fakes: every test talks to a real Redis. When ``CI`` is set a missing ``redis-server``
fails the run instead of skipping it.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def redis_server_binary() -> str:
    binary = shutil.which("redis-server")
    if binary is None:
        message = (
            "redis-server is not on the PATH; install it (apt-get install -y redis-server) "
            "or set FLO_REDIS_TEST_URL to a Redis 7+"
        )
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
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
        args = [
            redis_server_binary(),
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--save", "",
            "--appendonly", "yes" if self.appendonly else "no",
            "--dir", str(self.workdir),
            "--logfile", str(self.workdir / "redis.log"),
            *self.extra,
        ]  # fmt: skip
        self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 10
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


@dataclass
class RedisCluster:
    """A private Redis Cluster of ``masters`` redis-servers on free ports, no replicas,
    joined with ``redis-cli --cluster create``; all 16384 slots covered when started."""

    masters: int = 3
    servers: list[RedisServer] = field(default_factory=list)

    @property
    def url(self) -> str:
        """A ``redis+cluster://`` URL naming the first node (the others are discovered)."""
        return f"redis+cluster://127.0.0.1:{self.servers[0].port}"

    @property
    def ports(self) -> list[int]:
        return [s.port for s in self.servers]

    def start(self) -> RedisCluster:
        redis_server_binary()
        cli = shutil.which("redis-cli")
        if cli is None:
            message = "redis-cli is not on the PATH; it comes with redis-server (apt-get)"
            if os.environ.get("CI"):
                pytest.fail(message)
            pytest.skip(message)
        for _ in range(self.masters):
            server = RedisServer(
                extra=(
                    "--cluster-enabled", "yes",
                    "--cluster-node-timeout", "5000",
                    "--cluster-config-file", "nodes.conf",
                    "--cluster-require-full-coverage", "no",
                    # The bus port defaults to port + 10000, past 65535 for high ports.
                    "--cluster-port", str(free_port()),
                ),
            )  # fmt: skip
            self.servers.append(server.start())
        try:
            nodes = [f"127.0.0.1:{port}" for port in self.ports]
            create = [
                cli,
                "--cluster",
                "create",
                *nodes,
                "--cluster-replicas",
                "0",
                "--cluster-yes",
            ]
            subprocess.run(
                create,
                check=True,
                capture_output=True,
                timeout=60,
            )
            self._wait_ok()
        except BaseException:
            self.stop()
            raise
        return self

    def cli(self, port: int, *args: str) -> str:
        """Run one ``redis-cli`` command against the node on ``port``; its output."""
        done = subprocess.run(
            ["redis-cli", "-p", str(port), *args],
            check=True,
            capture_output=True,
            timeout=30,
        )
        return done.stdout.decode().strip()

    def _wait_ok(self) -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            states = [self.cli(port, "cluster", "info") for port in self.ports]
            if all("cluster_state:ok" in s for s in states) and all(
                "cluster_slots_assigned:16384" in s for s in states
            ):
                return
            time.sleep(0.1)
        raise RuntimeError("the cluster did not reach cluster_state:ok in 30 s")

    def stop(self) -> None:
        for server in self.servers:
            server.stop()
        self.servers.clear()

    def node_id(self, port: int) -> str:
        return self.cli(port, "cluster", "myid")

    def owner_port(self, slot: int) -> int:
        """The port of the primary that owns ``slot``."""
        for line in self.cli(self.ports[0], "cluster", "nodes").splitlines():
            fields = line.split()
            if "master" not in fields[2]:
                continue
            for part in fields[8:]:
                if part.startswith("["):
                    continue
                low, _, high = part.partition("-")
                if int(low) <= slot <= int(high or low):
                    return int(fields[1].split(":")[1].split("@")[0])
        raise LookupError(f"no primary owns slot {slot}")

    def move_slot(self, slot: int, target_port: int) -> None:
        """Move ``slot`` with its keys to the primary on ``target_port``, the way
        ``redis-cli --cluster reshard`` does: IMPORTING / MIGRATING, MIGRATE the keys in
        batches, then SETSLOT NODE on every primary. No failover, nothing lost."""
        source_port = self.owner_port(slot)
        if source_port == target_port:
            return
        source, target = self.node_id(source_port), self.node_id(target_port)
        self.cli(target_port, "cluster", "setslot", str(slot), "importing", source)
        self.cli(source_port, "cluster", "setslot", str(slot), "migrating", target)
        while True:
            keys = self.cli(source_port, "cluster", "getkeysinslot", str(slot), "100")
            names = [k for k in keys.splitlines() if k]
            if not names:
                break
            migrate = ["migrate", "127.0.0.1", str(target_port), "", "0", "5000", "keys"]
            self.cli(source_port, *migrate, *names)
        for port in [target_port, source_port, *self.ports]:
            self.cli(port, "cluster", "setslot", str(slot), "node", target)
