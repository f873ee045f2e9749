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
