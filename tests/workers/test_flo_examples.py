"""flo-python 0.1.2's own ``examples/basic.py`` runs to completion against flo-redis, with
its KV part removed and only its import and endpoint changed (``examples/flo_basic.py``)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis_server import RedisServer

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture
def fresh_redis() -> Iterator[str]:
    """A Redis of its own: the example always uses the namespace 'example'."""
    server = RedisServer().start()
    try:
        yield server.url
    finally:
        server.stop()


@pytest.mark.slow
def test_flos_basic_example_runs_to_completion(fresh_redis: str) -> None:
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / "flo_basic.py"), fresh_redis],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "Connected!" in out and "=== Done ===" in out
    assert "Received 3 messages" in out
    # Priority 10 is taken after the two at priority 0.
    lines = [line.strip() for line in out.splitlines() if line.strip().startswith("seq=")]
    assert [line.split(": ", 1)[1] for line in lines] == [
        '{"task": "task1"}',
        '{"task": "task3"}',
        '{"task": "task2"}',
    ]
