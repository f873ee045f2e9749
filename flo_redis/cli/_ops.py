"""What the operator commands share: connection options, running a coroutine with a
client, ``--json`` output, confirmation of destructive steps, rich tables. Everything
is printed through :mod:`._render`, which makes it safe for a terminal."""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import json
import signal
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import click

from flo_redis.cli import _render
from flo_redis.cli._names import NAMESPACE, Names
from flo_redis.cli._options import namespace_option, url_option
from flo_redis.cli._tables import wide_option
from flo_redis.client import FloClient
from flo_redis.errors import FloError
from flo_redis.ops.discovery import WorkerSummary

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])


def connection_options(command: F) -> F:
    """``--url`` and ``--namespace`` (:mod:`._options`), as every subcommand takes them."""
    return url_option(namespace_option("to look at and steer")(command))


def json_option(command: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")(command)


def yes_option(command: F) -> F:
    return click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")(command)


def list_command(group: click.Group) -> Callable[[Callable[..., Any]], click.Command]:
    """``<group> list``, taking the connection options, ``--json`` and ``--wide``."""

    def decorate(fn: Callable[..., Any]) -> click.Command:
        return group.command("list")(connection_options(json_option(wide_option(fn))))

    return decorate


def with_client(
    url: str,
    namespace: str,
    work: Callable[[FloClient], Awaitable[T]],
    names: Names | None = NAMESPACE,
) -> T:
    """Run ``work`` with a connected client once ``names`` are found to exist (None: a
    serving command, whose namespace may fill later); a name that does not exist, and
    flo's errors, become a one-line message and exit status 1."""

    async def main() -> T:
        async with FloClient(url, namespace=namespace) as client:
            if names is not None:
                await names.check(client)
            return await work(client)

    try:
        return asyncio.run(main())
    except FloError as exc:
        raise click.ClickException(f"{type(exc).__name__}: {exc}") from exc


async def until_stopped() -> None:
    """Return once SIGINT or SIGTERM comes, saying which on stderr: both stop a serving
    command cleanly (exit 0), also where SIGINT came in ignored (a process started in
    the background by a shell without job control)."""
    stop = asyncio.Event()
    received: list[signal.Signals] = []
    loop = asyncio.get_running_loop()

    def on(sig: signal.Signals) -> None:
        received.append(sig)
        stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on, sig)
    await stop.wait()
    _render.say(f"{received[0].name} received: stopping", err=True)


def confirm(yes: bool, question: str) -> None:
    """Ask before a destructive step unless ``--yes``; abort (exit 1) on no."""
    if not yes:
        _render.ask(question)


def plain(value: Any) -> Any:
    """``value`` as JSON-ready data: dataclasses as objects, bytes as text when they
    are UTF-8 (else hex), enums by name."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, enum.Enum):
        return value.name if not isinstance(value, str) else value.value
    if isinstance(value, bytes):
        try:
            return value.decode()
        except UnicodeDecodeError:
            return value.hex()
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


def print_json(value: Any) -> None:
    """``value`` as JSON, exact: JSON escapes every control character itself (and, with
    ``ensure_ascii``, everything beyond ASCII), so the terminal cleaning changes nothing."""
    _render.say(json.dumps(plain(value), indent=2, sort_keys=False, ensure_ascii=True))


def report(as_json: bool, line: str, **facts: Any) -> None:
    """What a command that changes something did: ``facts`` as one JSON object with
    ``--json``, else ``line`` for people."""
    if as_json:
        print_json(facts)
    else:
        _render.say(line)


def age(ms: int | None, now_ms: int) -> str:
    """How long ago ``ms`` was, for people: '3s', '4m', '2h'."""
    if not ms:
        return "-"
    seconds = max(now_ms - ms, 0) // 1000
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def worker_figures(summary: WorkerSummary) -> str:
    """'3 live, 1 gone; handlers busy 4/30': busy and capacity count live workers only."""
    live = summary.total - summary.gone
    gone = f", {summary.gone} gone" if summary.gone else ""
    return f"{live} live{gone}; handlers busy {summary.busy}/{summary.capacity}"
