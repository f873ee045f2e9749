"""The Redis ACL patterns that cover one namespace's keys and channels
(:mod:`flo_redis.ops.roles` builds a role's ``ACL SETUSER`` line from them), kept beside
the names they match (:mod:`flo_redis._wire.keys`).

A namespace's queue, stream and owner keys and channels all carry a hash tag starting
``{<namespace>:`` (names hold no braces, and a namespace no colon, so no other
namespace's tag starts so); its registries and its dashboard's keys carry the tag
``{<namespace>}``. The namespace registry (``namespaces_key``) belongs to no namespace:
only roles over every namespace reach it.
"""

from __future__ import annotations

from flo_redis._wire.checks import check_namespace
from flo_redis._wire.keys import HANDOFF_CHANNEL, LIVE_CHANNEL, NOTICE_CHANNEL, PREFIX


def glob_escaped(text: str) -> str:
    """``text`` as a literal in a Redis glob pattern (ACL key and channel patterns)."""
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


def acl_key_patterns(namespace: str | None) -> tuple[str, ...]:
    """The key patterns reaching every key of ``namespace`` and no other namespace's
    (None: every flo-redis key, the namespace registry included)."""
    if namespace is None:
        return (f"{PREFIX}:*",)
    ns = glob_escaped(check_namespace(namespace))
    return (f"{PREFIX}:*{{{ns}:*", f"{PREFIX}:*{{{ns}}}:*")


def acl_channel_patterns(namespace: str | None, owners: tuple[str, ...]) -> tuple[str, ...]:
    """The channel patterns reaching ``namespace``'s queue channels (wake-ups, ends: the
    channels named like a queue's keys) and, of its owners' channels, the kinds
    ``owners`` names (:data:`LIVE_CHANNEL`, :data:`NOTICE_CHANNEL`,
    :data:`HANDOFF_CHANNEL`). None: those of every namespace."""
    tag = "{" + glob_escaped(check_namespace(namespace)) + ":*" if namespace is not None else "*"
    # A worker's liveness channel in the registry's slot ({<namespace>}): worker health.
    registry = (
        (f"{LIVE_CHANNEL}{{{glob_escaped(namespace)}}}:*",)
        if namespace is not None and LIVE_CHANNEL in owners
        else ()
    )
    if set(owners) == {LIVE_CHANNEL, NOTICE_CHANNEL, HANDOFF_CHANNEL}:
        return (f"{PREFIX}:{tag}" if namespace is None else f"{PREFIX}:*{tag}", *registry)
    streams = f"{PREFIX}:s" + ("" if namespace is None else "*")  # partitions: flo:s<p>:
    prefixes = (f"{PREFIX}:a:", streams, f"{PREFIX}:q:", *owners)
    return (*(prefix + tag for prefix in prefixes), *registry)
