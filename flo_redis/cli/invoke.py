"""``flo-redis invoke ACTION --data JSON [--wait]``: create a run from the shell, its
input given inline, from a file (``@path``) or from stdin (``-``)."""

from __future__ import annotations

import json

import click

from flo_redis.actions.runs import MAX_WAIT_MS
from flo_redis.cli._names import Names
from flo_redis.cli._ops import connection_options, json_option, print_json, with_client
from flo_redis.cli._options import Seconds
from flo_redis.cli._render import say
from flo_redis.client import FloClient
from flo_redis.errors import WaitTimeoutError
from flo_redis.types import ActionInvokeOptions, ActionRunStatus, RunStatus
from flo_redis.types.base import MAX_TIME_MS


def register(group: click.Group) -> None:
    group.add_command(invoke)


def _data_given(ctx: click.Context, param: click.Parameter, data: str) -> bytes:
    """The input ``--data`` names, checked to be UTF-8 JSON: the text itself, the bytes of
    the file ``@path`` or of stdin (``-``). A command line holds at most about 128 KB per
    argument; a file or stdin holds any size the client takes."""
    if data == "-" or data.startswith("@"):
        path = data.removeprefix("@")
        try:
            with click.open_file(path, "rb") as file:  # "-": stdin
                raw: bytes = file.read()
        except OSError as exc:
            raise click.BadParameter(f"cannot read {path!r}: {exc.strerror}") from exc
    else:
        raw = data.encode()
    try:
        json.loads(raw.decode())
    except ValueError as exc:  # UnicodeDecodeError is one
        raise click.BadParameter(f"not UTF-8 JSON: {exc}") from exc
    return raw


def _key_given(ctx: click.Context, param: click.Parameter, key: str | None) -> str | None:
    if key == "":
        raise click.BadParameter("must not be empty; leave the option out to invoke without one")
    return key


@click.command("invoke")
@connection_options
@json_option
@click.argument("action")
@click.option("--data", default="null", show_default=True, callback=_data_given,
              help="The input: JSON text, @FILE for a file's, - for stdin's.")  # fmt: skip
@click.option("--delay", type=Seconds(0, MAX_TIME_MS / 1000), default=0.0,
              help="Seconds from now before the run is offered to a worker.")  # fmt: skip
@click.option("--priority", type=click.IntRange(0, 255), default=0, show_default=True,
              help="0 to 255; ready runs of a lower value are taken first.")  # fmt: skip
@click.option("--idempotency-key", default=None, callback=_key_given,
              help="Invoke at most once per key.")  # fmt: skip
@click.option("--wait", is_flag=True, help="Wait until the run finishes; print its result.")
@click.option("--timeout", type=Seconds(0, MAX_WAIT_MS / 1000), default=60.0, show_default=True,
              help="Seconds --wait waits at most (a day at most).")  # fmt: skip
def invoke(
    url: str,
    namespace: str,
    as_json: bool,
    action: str,
    data: bytes,
    delay: float,
    priority: int,
    idempotency_key: str | None,
    wait: bool,
    timeout: float,
) -> None:
    """Create a run of ACTION with --data as its input (UTF-8 JSON) and print its id (an
    --idempotency-key already seen prints the first run's); with --wait, wait for it to
    finish and print its output (exit 1 if it failed, 2 if it had not finished by
    --timeout)."""
    try:
        opts = ActionInvokeOptions(
            delay_ms=round(delay * 1000), idempotency_key=idempotency_key, priority=priority
        )
    except ValueError as exc:  # what the options refuse beyond the checks above
        raise click.UsageError(str(exc)) from exc

    async def run(client: FloClient) -> tuple[str, ActionRunStatus | WaitTimeoutError | None]:
        run_id = (await client.action.invoke(action, data, opts)).run_id
        if not wait:
            return run_id, None
        try:
            return run_id, await client.action.wait(run_id, timeout_ms=round(timeout * 1000))
        except WaitTimeoutError as exc:
            return run_id, exc

    run_id, finished = with_client(url, namespace, run, Names(action=action))
    if not wait:
        if as_json:
            print_json({"run_id": run_id})
        else:
            say(run_id)
        return
    if not isinstance(finished, ActionRunStatus):  # the wait timed out
        if as_json:
            print_json({"run_id": run_id, "status": None})
        else:
            # The state read at the deadline, not before the wait.
            now = f" (it is {finished.status.status.name})" if finished is not None else ""
            say(f"{run_id}: not finished after {timeout:g} s{now}", err=True)
        raise SystemExit(2)
    if as_json:
        print_json(finished)
    elif finished.status == RunStatus.COMPLETED:
        say((finished.output or b"").decode(errors="replace"))
    else:
        say(f"{run_id}: {finished.status.name}: {finished.error_message}", err=True)
    if finished.status != RunStatus.COMPLETED:
        raise SystemExit(1)
