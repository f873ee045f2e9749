"""Every Python block of the README runs as written, against a fresh private Redis."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis_server import RedisServer

README = Path(__file__).resolve().parent.parent / "README.md"
PROMISE = re.compile(r"^\s*print\(.*\)\s+# (.+)$", re.MULTILINE)
BLOCK = re.compile(r"^```python\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def python_blocks() -> list[tuple[int, str]]:
    text = README.read_text()
    return [(text.count("\n", 0, m.start()) + 1, m.group(1)) for m in BLOCK.finditer(text)]


@pytest.fixture
def fresh_redis() -> Iterator[str]:
    server = RedisServer().start()
    try:
        yield server.url
    finally:
        server.discard()


def test_the_readme_has_python_blocks() -> None:
    assert len(python_blocks()) >= 5


@pytest.mark.parametrize(
    ("line", "code"), python_blocks(), ids=[f"line-{n}" for n, _ in python_blocks()]
)
def test_a_readme_block_runs_as_written(
    line: int, code: str, fresh_redis: str, tmp_path: Path
) -> None:
    script = tmp_path / f"readme_line_{line}.py"
    script.write_text(code)
    env = {**os.environ, "REDIS_URL": fresh_redis}
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, f"README block at line {line} failed:\n{done.stderr}"
    # A `print(...)  # text` line promises that text on the output.
    for promised in PROMISE.findall(code):
        assert promised in done.stdout, (line, promised, done.stdout)
