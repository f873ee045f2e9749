"""A worker target for the terminal tests (imported by the ``flo-redis worker`` command).

Action ``echo_error``: the handler fails for good with its input as the error text, as a
handler that puts what it was sent into its exception does.
"""

from __future__ import annotations

from flo_redis import ActionContext, ActionRegisterOptions, ActionWorker, FloClient


async def echo_error(ctx: ActionContext) -> bytes:
    raise ValueError(ctx.payload.decode())


def build(client: FloClient) -> ActionWorker:
    worker = client.new_action_worker(concurrency=1, block_ms=500)
    worker.register_action("echo_error", echo_error, ActionRegisterOptions(max_retries=1))
    return worker
