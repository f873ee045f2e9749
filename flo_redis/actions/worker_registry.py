"""The worker registry's records: the one a registration writes, and a page of
``client.worker.list`` read back as flo's ``WorkerInfo``, each told whether its process
is alive now."""

from __future__ import annotations

import dataclasses
import functools
import importlib.metadata
import os
import socket
from collections.abc import Sequence
from typing import Any

from flo_redis._session.session import Session
from flo_redis._wire.aside import SetAside, scope_of, warn_set_aside, warn_unreadable
from flo_redis._wire.codec import BadRecord, present, text, unpack_record
from flo_redis._wire.gateway import WORKER_PRESENCE
from flo_redis._wire.keys import NamespaceKeys, is_name, owner_channel
from flo_redis._wire.status import Status, refusal
from flo_redis._wire.worker_replies import WorkerRow
from flo_redis.types import WorkerInfo, WorkerRegisterOptions, WorkerStatus, WorkerType

MAX_CURSOR_BYTES = 4096  # a list page's cursor (a worker id)
SET_ASIDE = -2  # a worker_list row of a worker whose record was set aside (lib/workers.lua)


@functools.cache
def flo_redis_version() -> str:
    """The installed flo-redis version (a worker's record names it)."""
    try:
        return importlib.metadata.version("flo-redis")
    except importlib.metadata.PackageNotFoundError:  # run from a source tree not installed
        return "0+unknown"


def worker_record(
    task_types: Sequence[str], opts: WorkerRegisterOptions, owner_id: str
) -> dict[str, Any]:
    """What a registration stores for an action worker (``lua/lib/workers.lua``), its
    counters left to the script: they start at zero. Besides what the caller gives, it
    names the process that registers: its owner id, flo-redis version, host and pid."""
    return {
        "wt": int(WorkerType.ACTION),
        "mc": opts.concurrency,
        "tt": list(task_types),
        "ow": owner_id,
        "v": flo_redis_version(),
        "hs": socket.gethostname()[:256],
        "pid": os.getpid(),
        **present(mid=opts.machine_id, md=opts.metadata),
    }


def worker_info(row: WorkerRow) -> WorkerInfo:
    """A row of ``worker_list`` as flo's ``WorkerInfo``; :class:`BadRecord` (or the
    error of a field) when its record does not hold one."""
    rec = unpack_record(row.record)
    return WorkerInfo(
        worker_id=row.worker_id,
        worker_type=WorkerType(int(rec.get("wt", 0))),
        status=WorkerStatus(row.worker_status),
        current_load=int(rec.get("cl", 0)),
        max_concurrency=int(rec.get("mc", 0)),
        tasks_completed=int(rec.get("tc", 0)),
        tasks_failed=int(rec.get("tf", 0)),
        registered_at_ms=int(rec["ra"]),
        last_heartbeat_ms=int(rec["hb"]),
        machine_id=text(rec.get("mid")),
        metadata=text(rec.get("md")),
        task_types=[text(t) or "" for t in rec.get("tt", [])],
        owner_id=text(rec.get("ow")),
        version=text(rec.get("v")),
        host=text(rec.get("hs")),
        pid=int(rec["pid"]) if "pid" in rec else None,
    )


async def read_page(
    session: Session, ns: NamespaceKeys, rows: Sequence[WorkerRow]
) -> list[WorkerInfo]:
    """The workers of a page of rows, each with ``alive`` set (:func:`with_presence`); a
    row set aside or that cannot be read is logged and left out."""
    workers: list[WorkerInfo] = []
    owners: list[str | None] = []
    for row in rows:
        if row.worker_status == SET_ASIDE:
            why = row.record.decode(errors="replace")
            warn_set_aside(scope_of(ns), [SetAside("worker", row.worker_id, why)])
            continue
        try:
            info = worker_info(row)
            owner = text(unpack_record(row.record).get("ow"))
        except (BadRecord, KeyError, ValueError, TypeError, AttributeError) as exc:
            warn_unreadable(
                ("worker", ns.namespace, row.worker_id),
                f"worker {row.worker_id!r} of namespace {ns.namespace!r}: its record "
                f"cannot be read ({type(exc).__name__}: {exc}); left out of the list",
            )
            continue
        workers.append(info)
        owners.append(owner)
    return await with_presence(session, ns, workers, owners)


async def with_presence(
    session: Session,
    ns: NamespaceKeys,
    workers: list[WorkerInfo],
    owners: list[str | None],
) -> list[WorkerInfo]:
    """``workers`` with ``alive`` set from their owners' liveness channels in the
    registry's slot (``owners[i]`` registered ``workers[i]``; None: not recorded), one
    ``worker_presence`` call for the page; a gone worker is never ACTIVE (it reads
    UNHEALTHY instead)."""
    asked = sorted({o for o in owners if o is not None and is_name(o)})
    if not asked:
        return workers
    reply = await WORKER_PRESENCE(session, ns, tail=[owner_channel(ns.tag, o) for o in asked])
    if reply.status != Status.OK:  # more owners than one page can name
        raise refusal(reply.status, f"worker presence: {len(asked)} owners in one call")
    present = dict(zip(asked, reply.counts, strict=True))
    out: list[WorkerInfo] = []
    for info, owner in zip(workers, owners, strict=True):
        if owner in present:
            alive = present[owner] > 0
            status = info.status
            if not alive and status == WorkerStatus.ACTIVE:
                status = WorkerStatus.UNHEALTHY  # a DRAINING one stays so
            info = dataclasses.replace(info, alive=alive, status=status)
        out.append(info)
    return out


__all__ = ["read_page", "with_presence", "worker_info", "worker_record"]
