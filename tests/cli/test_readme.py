"""Every Python block of the README and of the docs site runs as written, each against a
fresh private Redis."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis_server import RedisServer

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
PROMISE = re.compile(r"^\s*print\(.*\)\s+# (.+)$", re.MULTILINE)
BLOCK = re.compile(r"^```python\n(.*?)^```$", re.MULTILINE | re.DOTALL)
# A docs page may include another file's text (pymdownx.snippets): `--8<-- "path[:section]"`.
SNIPPET = re.compile(r'^--8<-- "([^":]+)[^"]*"$', re.MULTILINE)

# A block runs with REDIS_URL naming the test's own server, and under this guard: a
# connection to port 6379 (the Redis a developer may run, which the README's examples
# default to) ends the block at once, before anything is sent, saying so.
REFUSED = 86
GUARD = f"""
import os, runpy, sys
def refuse_the_default_port(event, args):
    if event == "socket.connect" and isinstance(args[1], tuple) and args[1][1] == 6379:
        sys.stderr.write(
            f"connected to {{args[1][0]}}:6379, a server the tests did not start: "
            "take the URL from REDIS_URL\\n"
        )
        sys.stderr.flush()
        os._exit({REFUSED})
sys.addaudithook(refuse_the_default_port)
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def pages() -> list[Path]:
    """The README and every page of the docs site."""
    return [README, *sorted(DOCS.rglob("*.md"))]


def python_blocks(page: Path) -> list[tuple[int, str]]:
    """``(line, code)`` of each ```` ```python ```` block of ``page``."""
    text = page.read_text()
    return [(text.count("\n", 0, m.start()) + 1, m.group(1)) for m in BLOCK.finditer(text)]


def all_blocks() -> list[tuple[str, int, str]]:
    return [
        (str(page.relative_to(ROOT)), line, code)
        for page in pages()
        for line, code in python_blocks(page)
    ]


@pytest.fixture
def fresh_redis() -> Iterator[str]:
    server = RedisServer().start()
    try:
        yield server.url
    finally:
        server.discard()


def test_the_readme_and_the_docs_have_python_blocks() -> None:
    assert len(python_blocks(README)) >= 2
    assert len(all_blocks()) - len(python_blocks(README)) >= 15


def test_every_included_file_is_run_or_holds_no_python_block() -> None:
    """A page's blocks are run from the page's own text, so a block a page includes from
    another file is run only if that file is one of the pages (the README is)."""
    for page in DOCS.rglob("*.md"):
        for included in SNIPPET.findall(page.read_text()):
            path = ROOT / included
            assert path.exists(), (page, included)
            assert path in pages() or not python_blocks(path), (page, included)


@pytest.mark.parametrize(
    ("page", "line", "code"), all_blocks(), ids=[f"{p}:{n}" for p, n, _ in all_blocks()]
)
def test_a_documented_block_runs_as_written(
    page: str, line: int, code: str, fresh_redis: str, tmp_path: Path
) -> None:
    name = re.sub(r"\W", "_", page) + f"_line_{line}.py"
    done = run_guarded(code, name, fresh_redis, tmp_path)
    assert done.returncode == 0, f"{page}: the block at line {line} failed:\n{done.stderr}"
    # A `print(...)  # text` line promises that text on the output.
    for promised in PROMISE.findall(code):
        assert promised in done.stdout, (page, line, promised, done.stdout)


def run_guarded(
    code: str, name: str, redis_url: str, folder: Path
) -> subprocess.CompletedProcess[str]:
    """``code`` run as a script with REDIS_URL set to ``redis_url``, under :data:`GUARD`."""
    script = folder / name
    script.write_text(code)
    return subprocess.run(
        [sys.executable, "-c", GUARD, str(script)],
        cwd=folder,
        env={**os.environ, "REDIS_URL": redis_url},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_block_that_reaches_the_default_port_is_stopped_before_it_connects(
    fresh_redis: str, tmp_path: Path
) -> None:
    code = (
        "import asyncio\n"
        "from flo_redis import FloClient\n"
        "async def main():\n"
        "    async with FloClient('redis://localhost:6379', namespace='readme') as client:\n"
        "        await client.queue.enqueue('mail', b'x')\n"
        "asyncio.run(main())\n"
    )
    done = run_guarded(code, "reaches_6379.py", fresh_redis, tmp_path)
    assert done.returncode == REFUSED, done.stderr
    assert ":6379, a server the tests did not start" in done.stderr
    # The guard leaves the test's own server alone.
    assert run_guarded("import os, redis\nredis.Redis.from_url(os.environ['REDIS_URL']).ping()\n",
                       "own.py", fresh_redis, tmp_path).returncode == 0  # fmt: skip
