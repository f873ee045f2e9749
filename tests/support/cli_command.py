"""Running ``flo-redis`` as users do: ``python -m flo_redis.cli ARGS`` in a subprocess."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

TESTS = Path(__file__).resolve().parent
# Options the tests set themselves; a developer's environment must not leak in.
_OWN_ENV = (
    "FLO_REDIS_URL",
    "REDIS_URL",
    "FLO_REDIS_NAMESPACE",
    "FLO_REDIS_CONCURRENCY",
    "FLO_REDIS_LOG_LEVEL",
    "FLO_REDIS_LOG_FORMAT",
    "FLO_REDIS_SHUTDOWN_TIMEOUT",
    "FLO_REDIS_PROCESSES",
    "FLO_REDIS_METRICS_PORT",
    "FLO_REDIS_METRICS_HOST",
    "FLO_REDIS_REDACT",
    "FLO_REDIS_REDACT_KEYS",
    "FLO_REDIS_EXECUTOR",
    "FLO_REDIS_MAX_RUNS_PER_CHILD",
    "FLO_REDIS_MEMORY_LIMIT_MB",
    "FLO_REDIS_STOP_GRACE",
)


MODULE = (sys.executable, "-m", "flo_redis.cli")
"""The command as ``python -m flo_redis.cli``."""
SCRIPT = (str(Path(sys.executable).with_name("flo-redis")),)
"""The command as the console script pip installs, which a user types."""


class Command:
    """``python -m flo_redis.cli ARGS`` (or ``program``) in the tests folder, its output
    (stdout and stderr together) kept."""

    def __init__(
        self, args: list[str], env: dict[str, str], program: tuple[str, ...] = MODULE
    ) -> None:
        self.out = tempfile.TemporaryFile()  # noqa: SIM115 - closed by close()
        base = {k: v for k, v in os.environ.items() if k not in _OWN_ENV}
        self.proc = subprocess.Popen(
            [*program, *args],
            cwd=TESTS,
            env={**base, **env},
            stdout=self.out,
            stderr=subprocess.STDOUT,
        )

    def output(self) -> str:
        self.out.seek(0)
        return self.out.read().decode()

    def signal(self, sig: int = signal.SIGTERM) -> None:
        self.proc.send_signal(sig)

    def wait(self, timeout: float = 60) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"still running after {timeout} s:\n{self.output()}") from None

    def exits(self, code: int, timeout: float = 60) -> bool:
        """Whether it exits with ``code``; its output is printed for a failing test."""
        got = self.wait(timeout)
        print(self.output())
        return got == code

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self.out.close()


def flo_redis(
    url: str, namespace: str, *args: str, env: dict[str, str] | None = None, stdin: bytes = b""
) -> subprocess.CompletedProcess[str]:
    """``flo-redis ARGS`` run to its end with ``--url`` and ``--namespace`` from the
    environment (as an operator would set them), its stdout and stderr kept apart."""
    base = {k: v for k, v in os.environ.items() if k not in _OWN_ENV}
    own = {"FLO_REDIS_URL": url, "FLO_REDIS_NAMESPACE": namespace, **(env or {})}
    done = subprocess.run(
        [sys.executable, "-m", "flo_redis.cli", *args],
        cwd=TESTS,
        env={**base, **own},
        input=stdin,
        capture_output=True,
        timeout=120,
        check=False,
    )
    return subprocess.CompletedProcess(
        done.args, done.returncode, done.stdout.decode(), done.stderr.decode()
    )
