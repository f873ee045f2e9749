"""Redis ACL refusals (``NOPERM``) as :class:`UnauthorizedError`, naming the command and
the right the user lacks.

Redis says which command it refused when the command came from the client, but only the
script and line when it came from inside a script; that line is found in the script's
flattened source (or, for a function, in the library's), so the message names the
command either way. Each role's rights: ``flo-redis acl ROLE`` (:mod:`flo_redis.ops.roles`;
README, section "Redis ACL").
"""

from __future__ import annotations

import re

import redis.exceptions as rex

from flo_redis._wire.lua import LuaLibrary, LuaScript
from flo_redis.errors import PermissionDeniedError

KEY_PATTERN = "~flo:*"
CHANNEL_PATTERN = "&flo:*"

_COMMAND = re.compile(r"permissions to run the '([\w|]+)' command")
_SCRIPT_LINE = re.compile(r"script: ([0-9a-f]{40}), on @user_script:(\d+)")
_FUNCTION_LINE = re.compile(r"script: (\w+), on @user_function:(\d+)")
_CALL = re.compile(r"redis\.p?call\(\s*'(\w+)'(?:,\s*'(\w+)')?")
# Redis says NOPERM; from a script, "The user executing the script can't run this
# command" / "can't access at least one of the keys"; Valkey "ACL failure in script: No
# permissions ...".
_MARKERS = (
    "noperm",
    "no permissions",
    "can't run this command",
    "can't access at least one of the keys",
    "can't publish to the channel",
)


def is_denied(exc: BaseException) -> bool:
    """Whether ``exc`` is Redis refusing something to this ACL user."""
    if isinstance(exc, rex.NoPermissionError):
        return True
    text = str(exc).lower()
    return isinstance(exc, rex.ResponseError) and any(m in text for m in _MARKERS)


def _command_in_script(
    text: str, scripts: dict[str, LuaScript], library: LuaLibrary | None
) -> str | None:
    found = _SCRIPT_LINE.search(text)
    source = None
    if found is not None:
        source = next((s.source for s in scripts.values() if s.sha == found.group(1)), None)
    elif library is not None:
        found = _FUNCTION_LINE.search(text)
        if found is not None and found.group(1) in library.functions:
            source = library.source
    if source is None or found is None:
        return None
    line = int(found.group(2))
    lines = source.splitlines()
    call = _CALL.search(lines[line - 1]) if 0 < line <= len(lines) else None
    if call is None:
        return None
    sub = call.group(2)
    # PUBSUB SHARDNUMSUB is granted as +pubsub|shardnumsub; XINFO STREAM etc. too.
    name = call.group(1).lower()
    return f"{name}|{sub.lower()}" if sub and name in ("pubsub", "xinfo", "xgroup") else name


def denied(
    what: str,
    exc: BaseException,
    scripts: dict[str, LuaScript] | None = None,
    library: LuaLibrary | None = None,
) -> PermissionDeniedError:
    """The typed error for ``exc``, a refusal of ``what`` by Redis's ACL (``scripts``
    and their ``library``: where a refusal from inside one is looked up)."""
    text = str(exc)
    command: str | None = None
    lowered = text.lower()
    if "one of the keys" in lowered or "access a key" in lowered:
        right = f"key access {KEY_PATTERN}"
    elif "channel" in lowered:
        right = f"channel access {CHANNEL_PATTERN}"
    else:
        found = _COMMAND.search(text)
        command = found.group(1).lower() if found else None
        if command is None and scripts is not None:
            command = _command_in_script(text, scripts, library)
        right = f"+{command}" if command else "the command"
    return PermissionDeniedError(
        f"{what}: Redis refused it to this user (NOPERM: {text}); the user needs {right}. "
        "Each role's rights: flo-redis acl ROLE (README, section 'Redis ACL')",
        right,
    )


__all__ = ["CHANNEL_PATTERN", "KEY_PATTERN", "denied", "is_denied"]
