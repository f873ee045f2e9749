"""Benchmark subprocesses: started with a deadline, read as JSON lines, killed by pid."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sys
import tempfile
from typing import IO, Any

from ._common import child_env, rss_bytes


class Child:
    """A ``python -m MODULE ARGS`` subprocess whose stdout is JSON lines."""

    def __init__(self, proc: asyncio.subprocess.Process, label: str, err: IO[bytes]) -> None:
        self.proc = proc
        self.label = label
        self._err = err
        self.peak_rss = 0
        self._sampler: asyncio.Task[None] | None = None

    @classmethod
    async def start(
        cls,
        module: str,
        *args: str,
        label: str = "",
        python: str | None = None,
        env: dict[str, str] | None = None,
    ) -> Child:
        """Start ``python -m module args`` (``python``: this interpreter unless named),
        with ``env`` added to the benchmark's environment."""
        # a file, not a pipe: a chatty child never blocks; closed in close()
        err = tempfile.TemporaryFile()  # noqa: SIM115
        proc = await asyncio.create_subprocess_exec(
            python or sys.executable,
            "-m",
            module,
            *args,
            stdout=asyncio.subprocess.PIPE,
            stderr=err,
            env={**child_env(), **(env or {})},
        )
        return cls(proc, label or module, err)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def sample_rss(self, interval: float = 0.05) -> None:
        """Track the process's peak VmRSS until it exits (``peak_rss``, bytes)."""

        async def sample() -> None:
            while self.proc.returncode is None:
                rss = rss_bytes(self.proc.pid)
                if rss is None:
                    return
                self.peak_rss = max(self.peak_rss, rss)
                await asyncio.sleep(interval)

        self._sampler = asyncio.create_task(sample())

    async def event(self, timeout: float) -> dict[str, Any]:
        """The next JSON line; RuntimeError (with the child's stderr) if it ends first."""
        assert self.proc.stdout is not None
        while True:
            try:
                line = await asyncio.wait_for(self.proc.stdout.readline(), timeout)
            except asyncio.TimeoutError:
                raise TimeoutError(f"{self.label}: no answer within {timeout:g} s") from None
            if not line:
                err = await self.stderr_tail()
                raise RuntimeError(f"{self.label} exited early: {err}")
            line = line.strip()
            if line.startswith(b"{"):
                return dict(json.loads(line))

    async def stderr_tail(self, limit: int = 1500) -> str:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.proc.wait(), 5)
        if self._err.closed:
            return ""
        self._err.seek(0)
        data = self._err.read()
        return data.decode(errors="replace")[-limit:].strip()

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(sig)

    async def close(self, timeout: float = 15.0) -> int | None:
        """Wait for the process to end (killing it past ``timeout``); its exit code."""
        try:
            await asyncio.wait_for(self.proc.wait(), timeout)
        except asyncio.TimeoutError:
            self.kill()
            await self.proc.wait()
        if self._sampler is not None:
            self._sampler.cancel()
        self._err.close()
        return self.proc.returncode
