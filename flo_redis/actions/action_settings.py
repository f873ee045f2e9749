"""An action's settings: the record a registration stores (``lua/lib/action.lua``), and
read back, for ``action.list`` and for the limit an ``invoke_many`` checks its inputs
against before its first call."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from flo_redis._session.session import Session
from flo_redis._wire import runner
from flo_redis._wire.checks import check_count, check_flow_key, stored_int
from flo_redis._wire.codec import decoded, present, text
from flo_redis._wire.keys import ActionKeys, action_keys, namespace_keys
from flo_redis._wire.refusals import bad_settings, not_registered
from flo_redis.errors import ValidationError, ValueTooLargeError
from flo_redis.types import (
    ActionInfo,
    ActionListResult,
    ActionRegisterOptions,
    ActionType,
    FlowControl,
    RateLimit,
)
from flo_redis.types.base import LUA_INT, U32

DEFAULT_RETENTION_MS = 24 * 3600 * 1000
DEFAULT_RETENTION_COUNT = 10_000
MAX_RATE_STARTS = 10_000  # RateLimit.max: the claim script logs each start in the window
MAX_RATE_WINDOW_MS = 86_400_000  # RateLimit.per_ms: a day

log = logging.getLogger("flo_redis.actions")


def rate_limit(limit: object, what: str = "rate_limit") -> tuple[int, int]:
    """``(max, per_ms)`` of a :class:`RateLimit`, ``(0, 0)`` for None (no limit)."""
    if limit is None:
        return 0, 0
    if not isinstance(limit, RateLimit):
        raise ValidationError(
            f"{what} must be a RateLimit(max, per_ms) or None, got {type(limit).__name__}"
        )
    return (
        check_count(f"{what}.max", limit.max, 1, MAX_RATE_STARTS),
        check_count(f"{what}.per_ms", limit.per_ms, 1, MAX_RATE_WINDOW_MS),
    )


MAX_FLOW_WEIGHT = 1000  # FlowControl.weights: a key's step in virtual time is 1000 / weight
MAX_FLOW_WEIGHTS = 1000  # keys given a weight, each a field of the action's settings


def flow_control(flow: object) -> dict[str, int]:
    """The settings fields of a :class:`FlowControl` (``lua/lib/flow.lua``): none for
    None (keys change nothing)."""
    if flow is None:
        return {}
    if not isinstance(flow, FlowControl):
        raise ValidationError(
            f"flow must be a FlowControl(concurrency=, fair=, weights=) or None, "
            f"got {type(flow).__name__}"
        )
    rate_max, rate_per_ms = rate_limit(flow.rate, "flow.rate")
    fields = {
        "flow_concurrency": check_count("flow.concurrency", flow.concurrency, 0, U32 - 1),
        "flow_fair": 1 if flow.fair else 0,
        "flow_rate_max": rate_max,
        "flow_rate_per_ms": rate_per_ms,
    }
    fields |= flow_once(flow)
    weights = flow.weights or {}
    if not isinstance(weights, dict) or len(weights) > MAX_FLOW_WEIGHTS:
        raise ValidationError(
            f"flow.weights must be a dict of at most {MAX_FLOW_WEIGHTS} flow keys -> weight"
        )
    if weights and not flow.fair:
        raise ValidationError("flow.weights apply to fair turns: pass fair=True with them")
    for key, weight in weights.items():
        fields["fw:" + check_flow_key(key)] = check_count(
            f"flow.weights[{key!r}]", weight, 1, MAX_FLOW_WEIGHT
        )
    return fields


FLOW_DEDUP, FLOW_THROTTLE, FLOW_DEBOUNCE = 1, 2, 3  # lua/lib/flow.lua's flow_once modes
MAX_FLOW_ONCE_MS = 86_400_000


def flow_once(flow: FlowControl) -> dict[str, int]:
    """The settings fields of a FlowControl's dedup, throttle or debounce (at most one)."""
    modes = []
    if flow.dedup:
        ttl = check_count("flow.dedup_ttl_ms", flow.dedup_ttl_ms, 0, MAX_FLOW_ONCE_MS)
        modes.append((FLOW_DEDUP, ttl))
    elif flow.dedup_ttl_ms:
        raise ValidationError("flow.dedup_ttl_ms applies to dedup: pass dedup=True with it")
    if flow.throttle_ms:
        ms = check_count("flow.throttle_ms", flow.throttle_ms, 1, MAX_FLOW_ONCE_MS)
        modes.append((FLOW_THROTTLE, ms))
    if flow.debounce_ms:
        ms = check_count("flow.debounce_ms", flow.debounce_ms, 1, MAX_FLOW_ONCE_MS)
        modes.append((FLOW_DEBOUNCE, ms))
    if len(modes) > 1:
        raise ValidationError("flow: give at most one of dedup, throttle_ms and debounce_ms")
    mode, ms = modes[0] if modes else (0, 0)
    return {"flow_once": mode, "flow_once_ms": ms}


def settings_record(
    action_type: ActionType, opts: ActionRegisterOptions, client_limit: int
) -> dict[str, int | str]:
    """What ``action_register`` stores for ``opts`` (checked already, but for the rate
    limit); ``client_limit``: the client's own payload limit, the most an action may
    accept."""
    rate_max, rate_per_ms = rate_limit(opts.rate_limit)
    max_payload = client_limit
    if opts.max_payload_bytes is not None:
        max_payload = min(max_payload, opts.max_payload_bytes)
    return {
        "action_type": int(action_type),
        "timeout_ms": opts.timeout_ms,
        "max_retries": opts.max_retries,
        "backoff_ms": opts.retry_backoff_ms,
        "backoff_max_ms": max(opts.retry_backoff_max_ms, opts.retry_backoff_ms),
        "max_concurrency": opts.max_concurrency,
        "max_payload": max_payload,
        "retention_ms": opts.retention_ms or DEFAULT_RETENTION_MS,
        "retention_count": opts.retention_count or DEFAULT_RETENTION_COUNT,
        "rate_max": rate_max,
        "rate_per_ms": rate_per_ms,
        **({"keep_inputs": 1} if opts.keep_inputs else {}),
        **flow_control(opts.flow),
        **present(owner=opts.owner, description=opts.description),
    }


def action_info(namespace: str, name: str, stored: dict[bytes, bytes]) -> ActionInfo:
    """An action's settings as ``action.list`` shows them, read as the scripts read them
    (``lua/lib/action.lua``): a setting that does not parse shows its default, and is
    logged at WARNING: until the action is registered again, no run of it is invoked,
    claimed or handed out."""
    bad = []

    def setting(field: str, default: int, high: int = U32 - 1) -> int:
        raw = stored.get(field.encode())
        value = None if raw is None else stored_int(raw, 0, high)
        if raw is not None and value is None:
            bad.append(f"{field} = {raw!r}")
        return default if value is None else value

    defaults = ActionRegisterOptions()
    info = ActionInfo(
        name=name,
        action_type=ActionType(setting("action_type", 0, max(ActionType))),
        timeout_ms=setting("timeout_ms", defaults.timeout_ms),
        max_retries=setting("max_retries", defaults.max_retries),
        description=text(stored.get(b"description")),
    )
    if bad:
        log.warning(
            "action %r in namespace %r: stored %s does not parse (written by hand, or by "
            "another version); it takes no new runs until registered again",
            name,
            namespace,
            ", ".join(bad),
        )
    return info


async def list_page(
    session: Session, ns: str, prefix: str | None, cursor: str, limit: int
) -> ActionListResult:
    """Up to ``limit`` actions of namespace ``ns`` in name order after ``cursor``, those
    starting with ``prefix`` (None: all), with their settings (:func:`action_info`)."""
    index = namespace_keys(ns).actions
    low = f"[{prefix}" if prefix else "-"
    if cursor and (not prefix or cursor >= prefix):
        low = f"({cursor}"
    # UTF-8 never holds the byte 0xFF: every name starting with the prefix sorts
    # below prefix + 0xFF, whatever characters follow.
    high = b"(" + prefix.encode() + b"\xff" if prefix else b"+"
    conn = session.redis
    with runner.redis_errors("list"):
        names = [
            decoded(n)
            for n in await conn.zrange(index, low, high, bylex=True, offset=0, num=limit + 1)
        ]
    more = len(names) > limit
    names = names[:limit]
    infos: list[ActionInfo] = []
    with runner.redis_errors("list"):
        async with conn.pipeline(transaction=False) as pipe:
            for n in names:
                pipe.hgetall(action_keys(ns, n).definition)
            defs = await pipe.execute()
    for n, d in zip(names, defs, strict=True):
        if d:  # else deleted between the two reads
            infos.append(action_info(ns, n, d))
    return ActionListResult(actions=infos, cursor=names[-1].encode() if more else None)


async def check_inputs_fit(session: Session, keys: ActionKeys, data: Sequence[bytes]) -> None:
    """Before the first of several ``invoke_many`` calls: every input within the
    action's own limit, so no later call is refused after earlier ones created runs."""
    with runner.redis_errors("invoke_many"):
        stored = await session.redis.hget(keys.definition, "max_payload")
    if stored is None:
        raise not_registered(keys)
    limit = stored_int(stored, 0, LUA_INT)
    if limit is None:
        raise bad_settings(keys)
    for index, item in enumerate(data):
        if limit < len(item):
            raise ValueTooLargeError(
                f"inputs[{index}] is {len(item)} bytes; action {keys.action!r} accepts "
                f"at most {limit} (its max_payload_bytes); nothing was created"
            )


__all__ = [
    "action_info",
    "check_inputs_fit",
    "list_page",
    "rate_limit",
    "settings_record",
]
