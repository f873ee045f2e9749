"""Whether a client calls its scripts as Redis Functions, and what an ``FCALL`` or a
``FUNCTION LOAD`` refused says to do next (:mod:`flo_redis._scripts` sends them; the
library is :func:`flo_redis._lua.library`; lua/README.md, "Functions")."""

from __future__ import annotations

import asyncio
import logging
import threading

import redis.exceptions as rex

from ._denied import is_denied

log = logging.getLogger("flo_redis.requests")

# What an FCALL refused without running asks for (:func:`refusal`).
MISSING = "missing"  # the library loaded, then the call sent again
BY_SHA = "by sha"  # this call and every later one by SHA
ONCE_BY_SHA = "once by sha"  # this call by SHA


class Functions:
    """Whether one client calls its scripts as functions (``on``), and the loading of
    the library for it: ``loads`` counts the loads made, so calls that found the
    library missing together cause one."""

    __slots__ = ("alock", "loads", "lock", "on")

    def __init__(self) -> None:
        self.on = True
        self.loads = 0
        self.lock = threading.Lock()  # the blocking client's loads
        self.alock: asyncio.Lock | None = None  # the asyncio client's (made in its loop)

    def off(self, why: str) -> None:
        """Call by SHA from now on."""
        if self.on:
            self.on = False
            log.info("calling scripts by SHA: %s", why)

    def loaded(self, outcome: rex.RedisError | None) -> bool | None:
        """Take in the outcome of ``FUNCTION LOAD`` (None: loaded). True: the library is
        there; False: the call goes by SHA, and every later one too when the load was
        refused for good (the user may not load functions, the server does not know
        the command, or it would not take the library), not when it was refused as
        out of memory; None: a failure that says nothing of functions (a lost
        connection, a replica), for the caller to raise as it raises any."""
        self.loads += 1
        if outcome is None or "already exists" in str(outcome):
            return True
        if isinstance(outcome, rex.OutOfMemoryError):
            return False
        text = str(outcome).lower()
        if isinstance(outcome, rex.ResponseError) and (
            is_denied(outcome) or "unknown" in text or "error registering" in text
        ):
            self.off(f"FUNCTION LOAD was refused ({outcome})")
            return False
        return None


def refusal(exc: rex.ResponseError, attempt: int) -> str | None:
    """What an ``FCALL`` refused without running asks for: :data:`MISSING`,
    :data:`BY_SHA` (an ACL user without ``+fcall``, a server or proxy without the
    command), :data:`ONCE_BY_SHA` (out of memory: a function that may write is refused
    before it starts, a script only at its first write); None for an answer of the
    function itself. A function still not found on the second attempt, after a load,
    does not stay there: :data:`BY_SHA`."""
    text = str(exc)
    if text.startswith("Function not found"):
        return MISSING if attempt == 1 else BY_SHA
    lowered = text.lower()
    if "'fcall'" in lowered and (is_denied(exc) or "unknown command" in lowered):
        return BY_SHA
    if isinstance(exc, rex.OutOfMemoryError):
        return ONCE_BY_SHA
    return None
