"""The dashboard's changes: POSTed forms, each allowed by the guard first (write access,
session, CSRF, origin), then sent through the client, then a redirect back to the page
with a note of what was done."""

from __future__ import annotations

from collections.abc import Mapping

from aiohttp import web

from flo_redis.dashboard import data
from flo_redis.dashboard.guard import local_path
from flo_redis.dashboard.render import CLIENT, GUARD
from flo_redis.errors import ValidationError
from flo_redis.types import StreamID


async def _form(request: web.Request) -> Mapping[str, str]:
    """The POSTed form, once the guard allowed the change."""
    form = await request.post()
    fields = {k: v for k, v in form.items() if isinstance(v, str)}
    await request.app[GUARD].check_change(request, request.app[CLIENT], fields.get("csrf", ""))
    return fields


def _back(
    fields: Mapping[str, str], done: str, default: str = "/", count: int | None = None
) -> web.HTTPSeeOther:
    target = local_path(fields.get("next", ""), default)
    joiner = "&" if "?" in target else "?"
    counted = "" if count is None else f"&n={count}"
    return web.HTTPSeeOther(f"{target}{joiner}done={done}{counted}")


async def login(request: web.Request) -> web.StreamResponse:
    form = await request.post()
    token = form.get("token")
    target = local_path(str(form.get("next", "")))
    response = web.HTTPSeeOther(f"{target}{'&' if '?' in target else '?'}done=login")
    token_text = token if isinstance(token, str) else ""
    await request.app[GUARD].log_in(request, request.app[CLIENT], token_text, response)
    raise response


async def logout(request: web.Request) -> web.StreamResponse:
    await _form(request)
    response = web.HTTPSeeOther("/?done=logout")
    await request.app[GUARD].log_out(request, request.app[CLIENT], response)
    raise response


async def requeue_run(request: web.Request) -> web.StreamResponse:
    fields = await _form(request)
    run_id = fields.get("id", "")
    await request.app[CLIENT].action.requeue(run_id)
    raise _back(fields, "requeued")


async def cancel_run(request: web.Request) -> web.StreamResponse:
    fields = await _form(request)
    await request.app[CLIENT].action.cancel(fields.get("id", ""))
    raise _back(fields, "cancelled")


async def requeue_failed(request: web.Request) -> web.StreamResponse:
    fields = await _form(request)
    result = await request.app[CLIENT].action.requeue_failed(fields.get("name", ""))
    raise _back(fields, "requeued_all", count=result.count)


async def purge(request: web.Request) -> web.StreamResponse:
    fields = await _form(request)
    if fields.get("confirm") != "yes":
        raise ValidationError("tick the box to confirm: a purge deletes the runs for good")
    result = await request.app[CLIENT].action.purge(fields.get("name", ""), fields.get("state", ""))
    raise _back(fields, "purged", count=result.count)


async def drain_worker(request: web.Request) -> web.StreamResponse:
    fields = await _form(request)
    await request.app[CLIENT].worker.drain(fields.get("id", ""))
    raise _back(fields, "drained", "/workers")


async def replay(request: web.Request) -> web.StreamResponse:
    fields = await _form(request)
    stream, group_name = fields.get("stream", ""), fields.get("group", "")
    letter = fields.get("id", "")
    if letter:
        partition, _, sid = letter.partition("/")
        try:
            ids, part = [StreamID.from_redis(sid)], int(partition)
        except ValueError:
            raise ValidationError(f"dead letter {letter!r} is not '<partition>/<id>'") from None
        await request.app[CLIENT].stream.replay_dead_letters(
            stream, group_name, ids=ids, partition=part
        )
    else:
        await request.app[CLIENT].stream.replay_dead_letters(stream, group_name)
    raise _back(fields, "replayed")


async def quarantine_replay(request: web.Request) -> web.StreamResponse:
    fields = await _form(request)
    await request.app[CLIENT].quarantine.replay(data.quarantine_of(fields), fields.get("id", ""))
    raise _back(fields, "put_back")


async def quarantine_delete(request: web.Request) -> web.StreamResponse:
    fields = await _form(request)
    await request.app[CLIENT].quarantine.delete(data.quarantine_of(fields), [fields.get("id", "")])
    raise _back(fields, "deleted")
