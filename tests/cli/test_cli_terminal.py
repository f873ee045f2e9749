"""What the command prints is safe for a terminal, whatever Redis holds: names with rich
markup in them, error texts and outputs with escape sequences, names with C1 controls
(written by a version that took them). Each command runs as users run it (a real
process); its tables show such values as visible text, ``--json`` gives them exactly,
and new names with C1 controls are refused."""

from __future__ import annotations

import ast
import asyncio
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import pytest
import redis.asyncio as aioredis
from click.testing import CliRunner
from polling import eventually

import flo_redis._wire.checks
import flo_redis._wire.keys
from flo_redis import (
    ActionRegisterOptions,
    FloClient,
    RunStatus,
    StreamGroupJoinOptions,
    StreamGroupNackOptions,
    ValidationError,
    WorkerAwaitOptions,
)
from flo_redis.cli._render import SafeGroup, terminal_text

TESTS = Path(__file__).resolve().parents[1] / "support"
CLI = Path(__file__).resolve().parents[2] / "flo_redis" / "cli"

MARKUP = "x[/]y[bold red]z"  # rich would read markup here, and fail on the [/]
OLD = "old\x9b2Jname"  # a C1 CSI in a name an earlier version took
ERROR = "boom \x1b]0;PWNED\x07\x1b[2J [red]red[/red] \u202eevil \x9b31m :smile:"
OUTPUT = "out \x1b[2J\x1b]0;PWNED\x07 \x85 [/] done"
# Anything a terminal obeys or that reorders text: C0 but tab and newline, DEL, C1, the
# bidi controls.
UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def cli(url: str, namespace: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``flo-redis ARGS`` in a process of its own, stdout and stderr apart, on a wide
    terminal (tables do not wrap)."""
    base = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("FLO_REDIS_") and k not in ("REDIS_URL", "FORCE_COLOR", "NO_COLOR")
    }
    return subprocess.run(
        [sys.executable, "-m", "flo_redis.cli", *args, "--url", url, "--namespace", namespace],
        capture_output=True,
        encoding="utf-8",
        cwd=TESTS,
        env={**base, "COLUMNS": "400", **env},
        timeout=60,
        check=False,
    )


def assert_safe(text: str, *, crashed: bool = False) -> None:
    """Nothing in ``text`` a terminal would obey; unless ``crashed`` is expected, no
    traceback either (rich's MarkupError was one)."""
    bad = UNSAFE.search(text)
    assert bad is None, f"{bad.group()!r} reached the terminal in:\n{text}"
    assert crashed or ("Traceback" not in text and "MarkupError" not in text), text


@pytest.fixture
def old_names(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Names as an earlier version checked them: C1 controls let through."""
    earlier = re.compile(r"[{}\x00-\x1f\x7f]")
    monkeypatch.setattr(flo_redis._wire.checks, "FORBIDDEN_IN_NAMES", earlier)
    monkeypatch.setattr(flo_redis._wire.keys, "FORBIDDEN_IN_NAMES", earlier)
    yield
    monkeypatch.undo()


@pytest.fixture
async def hostile(client: FloClient, old_names: None) -> dict[str, Any]:
    """Action MARKUP with a run failed with ERROR and one completed with OUTPUT, worker
    ``w[b]1``; action OLD and worker ``w\\x85old`` as an earlier version wrote them; a
    stream ``s[i]`` whose group ``g[/]`` dead-lettered a record."""
    await client.action.register(MARKUP, options=ActionRegisterOptions(max_retries=1))
    await client.action.register(OLD)
    await client.worker.register("w[b]1", [MARKUP])
    await client.worker.register("w\x85old", [OLD])
    for _ in range(2):
        await client.action.invoke(MARKUP, b"{}")
    failed, done = await client.worker.await_tasks(
        "w[b]1", [MARKUP], 2, WorkerAwaitOptions(block_ms=0)
    )
    await client.worker.fail("w[b]1", MARKUP, failed.run_id, ERROR)
    await client.worker.complete("w[b]1", MARKUP, done.run_id, OUTPUT.encode())
    await client.stream.group_join("s[i]", "g[/]", "c[b]", StreamGroupJoinOptions(max_deliver=1))
    await client.stream.append("s[i]", b"poison")
    [record] = (await client.stream.group_read("s[i]", "g[/]", "c[b]")).records
    await client.stream.group_nack(
        "s[i]", "g[/]", [record.id], StreamGroupNackOptions(consumer="c[b]")
    )
    return {"failed": failed.run_id, "done": done.run_id}


@pytest.mark.parametrize(
    ("args", "shown"),
    [
        (["status"], [MARKUP, "w[b]1", "w\\x85old", "s[i]", "g[/]"]),
        (["runs", "list", MARKUP, "--state", "failed"], ["boom \\x1b]0;PWNED\\x07\\x1b[2J"]),
        (["runs", "list", MARKUP, "--state", "completed"], ["w[b]1"]),
        (
            ["runs", "show", "{failed}"],
            [ERROR.translate({0x1B: "\\x1b", 7: "\\x07", 0x202E: "\\u202e", 0x9B: "\\x9b"})],
        ),
        (["runs", "show", "{done}"], ["out \\x1b[2J\\x1b]0;PWNED\\x07 \\x85 [/] done"]),
        (["workers", "list"], ["w[b]1", "w\\x85old", MARKUP]),
        (["streams", "list"], ["s[i]"]),
        (["dead-letters", "list", "s[i]", "g[/]"], ["c[b]"]),
    ],
)
def test_values_from_redis_print_as_the_text_they_are(
    redis_url: str, namespace: str, hostile: dict[str, Any], args: list[str], shown: list[str]
) -> None:
    done = cli(redis_url, namespace, *(a.format(**hostile) for a in args))
    assert done.returncode == 0, done.stderr
    assert_safe(done.stdout + done.stderr)
    for text in shown:
        assert text in done.stdout, (text, done.stdout)


def test_json_output_keeps_every_value_exact(
    redis_url: str, namespace: str, hostile: dict[str, Any]
) -> None:
    shown = cli(redis_url, namespace, "runs", "show", hostile["failed"], "--json")
    assert shown.returncode == 0, shown.stderr
    assert_safe(shown.stdout)  # JSON escapes them (\u001b)...
    assert json.loads(shown.stdout)["error_message"] == ERROR  # ...and gives them back
    done = cli(redis_url, namespace, "runs", "show", hostile["done"], "--json")
    assert json.loads(done.stdout)["output"] == OUTPUT
    status = cli(redis_url, namespace, "status", "--json")
    assert_safe(status.stdout)
    data = json.loads(status.stdout)
    assert {a["action"] for a in data["actions"]} == {MARKUP}  # OLD is no name now:
    assert "action name 'old\\x9b2Jname' contains" in status.stderr  # left out, said so
    assert {w["worker_id"] for w in data["workers"]} == {"w[b]1", "w\x85old"}


def test_a_terminal_that_takes_colours_gets_only_the_tables_own(
    redis_url: str, namespace: str, hostile: dict[str, Any]
) -> None:
    done = cli(redis_url, namespace, "runs", "show", hostile["failed"], FORCE_COLOR="1")
    assert done.returncode == 0, done.stderr
    assert "\x1b[" in done.stdout  # styled: rich's own colour codes are there
    assert_safe(re.sub(r"\x1b\[[0-9;]*m", "", done.stdout))  # and nothing else is
    assert "boom \\x1b]0;PWNED\\x07\\x1b[2J [red]red[/red]" in re.sub(
        r"\x1b\[[0-9;]*m", "", done.stdout
    )


async def test_invoke_wait_prints_the_output_and_the_error_cleaned(
    client: FloClient, redis_url: str, namespace: str
) -> None:
    await client.action.register("echo", options=ActionRegisterOptions(max_retries=1))
    await client.worker.register("w1", ["echo"])
    for finish, stream in (("complete", 0), ("fail", 1)):
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "flo_redis.cli", "invoke", "echo", "--wait",
            "--url", redis_url, "--namespace", namespace,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip

        async def claimed() -> list[Any]:
            return await client.worker.await_tasks(
                "w1", ["echo"], 1, WorkerAwaitOptions(block_ms=0)
            )

        [run] = await eventually(claimed, bool, timeout=30)
        if finish == "complete":
            await client.worker.complete("w1", "echo", run.run_id, OUTPUT.encode())
        else:
            await client.worker.fail("w1", "echo", run.run_id, ERROR)
        out, err = await asyncio.wait_for(proc.communicate(), 60)
        assert proc.returncode == stream, err
        text = (out if finish == "complete" else err).decode()
        assert_safe(out.decode() + err.decode())
        wanted = "\\x1b]0;PWNED\\x07" if finish == "complete" else "\\x1b]0;PWNED\\x07\\x1b[2J"
        assert wanted in text, text


def test_every_error_message_click_prints_is_cleaned() -> None:
    """A command's error (a FloError's message carries text from Redis) is printed
    cleaned by the group, whichever command raised it."""

    @click.group(cls=SafeGroup)
    def group() -> None:
        pass

    @group.command()
    def fails() -> None:
        raise click.ClickException(f"NotFoundError: {ERROR}")

    result = CliRunner().invoke(group, ["fails"])
    assert result.exit_code == 1
    assert_safe(result.output)
    assert "boom \\x1b]0;PWNED\\x07\\x1b[2J" in result.output


@pytest.mark.parametrize("log_format", ["text", "json"])
async def test_a_worker_logs_a_hostile_error_cleaned(
    command: Any, client: FloClient, redis_url: str, namespace: str, log_format: str
) -> None:
    cmd = command(
        "worker", "--url", redis_url, "--namespace", namespace, "--log-format", log_format,
        "hostile_app:build",
    )  # fmt: skip

    async def registered() -> bool:
        return bool((await client.worker.list()).workers)

    await eventually(registered, timeout=30)
    run = await client.action.invoke("echo_error", ERROR.encode())

    async def failed() -> RunStatus:
        return (await client.action.status(run.run_id)).status

    await eventually(failed, lambda s: s == RunStatus.FAILED, timeout=30)

    async def logged() -> str:
        return cmd.output()

    out = await eventually(logged, lambda o: "PWNED" in o, timeout=30)
    cmd.signal(signal.SIGTERM)
    cmd.wait()
    assert_safe(out, crashed=True)  # the handler's traceback is logged
    if log_format == "text":
        assert "boom \\x1b]0;PWNED\\x07\\x1b[2J" in out
    else:
        lines = [json.loads(line) for line in out.splitlines() if "PWNED" in line]
        assert any(ERROR in line["message"] for line in lines), lines


@pytest.mark.parametrize("c1", ["\x80", "\x85", "\x9b", "\x9f"])
async def test_names_with_c1_controls_are_refused_before_anything_is_sent(
    client: FloClient, raw: aioredis.Redis, redis_url: str, namespace: str, c1: str
) -> None:
    calls = {
        "action": lambda: client.action.register(f"a{c1}b"),
        "worker": lambda: client.worker.register(f"w{c1}", ["a"]),
        "stream": lambda: client.stream.append(f"s{c1}", b""),
        "group": lambda: client.stream.group_join("s", f"g{c1}", "c"),
        "consumer": lambda: client.stream.group_join("s", "g", f"c{c1}"),
        "invoke": lambda: client.action.invoke(f"a{c1}", b""),
    }
    for what, call in calls.items():
        with pytest.raises(ValidationError, match=r"control characters \(U\+0000-U\+001F"):
            await call()
        assert [k async for k in raw.scan_iter(match=f"*{namespace}*", count=1000)] == [], what
    with pytest.raises(ValidationError, match="control characters"):
        FloClient(redis_url, namespace=f"n{c1}")


async def test_the_character_after_c1_is_a_name_like_any(client: FloClient) -> None:
    await client.action.register("a\u00a0b")  # NO-BREAK SPACE, U+00A0
    assert [a.name for a in (await client.action.list()).actions] == ["a\u00a0b"]


def test_terminal_text_escapes_controls_and_keeps_the_rest() -> None:
    assert terminal_text("a\x1b[2Jb") == "a\\x1b[2Jb"
    assert terminal_text("t\x07\x00\x7f\x9b\x85") == "t\\x07\\x00\\x7f\\x9b\\x85"
    assert terminal_text("line\nnext\ttab") == "line\nnext\ttab"
    assert terminal_text("\u202eabc\u2066") == "\\u202eabc\\u2066"
    assert terminal_text("\ud800") == "\\ud800"  # a lone surrogate could not be written
    kept = "ünï 名前 \u00a0 [bold] :smile: 😀"
    assert terminal_text(kept) == kept
    assert terminal_text(42) == "42"


def _prints_around_render(func: ast.expr) -> bool:
    """Whether a call of ``func`` prints without the rendering layer: click's echo,
    confirm and prompt, ``print``, a console of one's own, a write to stdout/stderr."""
    text = ast.unparse(func)
    if isinstance(func, ast.Name):
        return func.id in ("print", "Console", "echo", "secho", "confirm", "prompt")
    if isinstance(func, ast.Attribute):
        return (
            (text.startswith("click.") and func.attr in ("echo", "secho", "confirm", "prompt"))
            or func.attr == "Console"
            or text in ("rich.print", "sys.stdout.write", "sys.stderr.write")
        )
    return False


def test_the_command_prints_only_through_its_rendering_layer() -> None:
    """No module of the command prints but through ``_render`` (which cleans), so a new
    command cannot forget."""
    found = []
    for path in sorted(CLI.glob("*.py")):
        if path.name == "_render.py":
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and _prints_around_render(node.func):
                found.append(f"{path.name}:{node.lineno} {ast.unparse(node.func)}")
            if isinstance(node, ast.ImportFrom) and node.module in (
                "click",
                "rich",
                "rich.console",
            ):
                names = {a.name for a in node.names}
                if names & {"echo", "secho", "confirm", "prompt", "print"}:
                    found.append(f"{path.name}:{node.lineno} imports {sorted(names)}")
    assert not found, found
