"""Helper scripts of the tests run as real processes, killed when the block ends."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

HERE = Path(__file__).resolve().parent


@contextlib.contextmanager
def script_process(script: str, *args: str) -> Iterator[subprocess.Popen[bytes]]:
    """``python tests/<script> args...`` while the block runs; SIGKILLed after it."""
    proc = subprocess.Popen([sys.executable, str(HERE / script), *args], cwd=HERE)
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait(10)


def cancel_worker(
    url: str, namespace: str, timeout_ms: int, mode: str = "touch"
) -> contextlib.AbstractContextManager[subprocess.Popen[bytes]]:
    """A worker process for action ``job`` (cancel_proc.py; ``mode``: touch, inline or
    sync) while the block runs."""
    return script_process("cancel_proc.py", url, namespace, "job", str(timeout_ms), mode)
