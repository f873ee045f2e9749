"""The dashboard's changes: POSTed forms, each allowed by the guard first (write access,
session, CSRF, origin), then sent through the client, then a redirect back to the page
with a note of what was done."""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import urlencode

from aiohttp import web

from flo_redis.dashboard import data
from flo_redis.dashboard.guard import local_path
from flo_redis.dashboard.render import CLIENT, GUARD, client_of
from flo_redis.dashboard.spaces import NS_PARAM
from flo_redis.errors import ValidationError
from flo_redis.types import StreamID


async def _form(request: web.Request) -> Mapping[str, str]:
    """The POSTed form, once the guard allowed the change."""
    form = await request.post()
    fields = {k: v for k, v in form.items() if isinstance(v, str)}
    await request.app[GUARD].check_change(request, client_of(request), fields.get("csrf", ""))
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
    await request.app[GUARD].log_in(request, client_of(request), token_text, response)
    raise response


async def logout(request: web.Request) -> web.StreamResponse:
    await _form(request)
    shown = client_of(request).namespace
    ns = "" if shown == request.app[CLIENT].namespace else "&" + urlencode({NS_PARAM: shown})
    response = web.HTTPSeeOther(f"/?done=logout{ns}")
    await request.app[GUARD].log_out(request, client_of(request), response)
    raise response


async def requeue_run(request: web.Request) -> web.StreamResponse:
    fields = await _form(request)
    run_id = fields.get("id", "")
    await client_of(request).action.requeue(run_id)
    raise _back(fields, "requeued")


async def cancel_run(request: web.Request) -> web.StreamResponse:
    fields = await _form(request)
    await client_of(request).action.cancel(fields.get("id", ""))
    raise _back(fields, "cancelled")


async def requeue_failed(request: web.Request) -> web.StreamResponse:
    fields = await _form(request)
    result = await client_of(request).action.requeue_failed(fields.get("name", ""))
    raise _back(fields, "requeued_all", count=result.count)


async def purge(request: web.Request) -> web.StreamResponse:
    fields = await _form(request)
    if fields.get("confirm") != "yes":
        raise ValidationError("tick the box to confirm: a purge deletes the runs for good")
    result = await client_of(request).action.purge(fields.get("name", ""), fields.get("state", ""))
    raise _back(fields, "purged", count=result.count)


async def drain_worker(request: web.Request) -> web.StreamResponse:
    fields = await _form(request)
    await client_of(request).worker.drain(fields.get("id", ""))
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
        await client_of(request).stream.replay_dead_letters(
            stream, group_name, ids=ids, partition=part
        )
    else:
        await client_of(request).stream.replay_dead_letters(stream, group_name)
    raise _back(fields, "replayed")


async def quarantine_replay(request: web.Request) -> web.StreamResponse:
    fields = await _form(request)
    await client_of(request).quarantine.replay(data.quarantine_of(fields), fields.get("id", ""))
    raise _back(fields, "put_back")


async def quarantine_delete(request: web.Request) -> web.StreamResponse:
    fields = await _form(request)
    await client_of(request).quarantine.delete(data.quarantine_of(fields), [fields.get("id", "")])
    raise _back(fields, "deleted")
