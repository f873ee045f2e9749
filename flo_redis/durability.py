"""The durability level of a write: what a call that changed state waits for before it
returns.

Redis replicates asynchronously: a primary answers a write as soon as it ran, and a
failover promotes a replica that may not have received the last ones. A level states
what the caller may count on when the call returns:

* ``Durability.PRIMARY`` (the default): the primary ran the write. Nothing is waited for,
  and nothing is added to the call.
* ``Durability.replicated(replicas, timeout_ms)``: ``WAIT replicas timeout_ms`` follows the
  script on the same connection, in the same write: the call returns once that many
  replicas acknowledged every write of the connection so far.
* ``Durability.fsynced(replicas, timeout_ms)``: ``WAITAOF 1 replicas timeout_ms``: the
  primary's append-only file was fsynced (and that many replicas' too). Redis 7.2 and
  newer, and Valkey, have ``WAITAOF``; on Redis 7.0 the first fsynced write is refused
  with :class:`DurabilityUnsupportedError` before it is sent.

A write that did not reach its level in time raises :class:`NotDurableError`: it WAS
applied on the primary, so it may or may not survive a failover. A level applies to the
writes a caller relies on (invoke, complete and fail, stream append and group ack, queue
enqueue and ack); reads and the other scripts never wait. Where a level is taken, the
strings ``"primary"``, ``"replicated"`` and ``"fsynced"`` name the default of each.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, ClassVar

from flo_redis.errors import DurabilityUnsupportedError, NotDurableError, ValidationError

__all__ = ["FSYNC_VERSION", "Durability", "DurabilityLike", "as_durability", "worker_durability"]

PRIMARY, REPLICATED, FSYNCED = "primary", "replicated", "fsynced"
# A write waits at most this long for its replicas: a longer wait is a stalled call,
# not a durability level (and the connection's own timeout is extended by it).
MAX_TIMEOUT_MS = 60_000
MAX_REPLICAS = 100
# The first Redis with WAITAOF (Valkey reports 7.2.4 or newer).
FSYNC_VERSION = (7, 2)


def _check_int(name: str, value: object, least: int, most: int, level: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not least <= value <= most:
        raise ValidationError(
            f"Durability.{level}: {name} must be an int from {least} to {most}, got {value!r}"
        )


@dataclass(frozen=True, slots=True)
class Durability:
    """A stated durability level (module docstring). Make one with :attr:`PRIMARY`,
    :meth:`replicated` or :meth:`fsynced`; a level out of range is refused with a
    :class:`ValidationError` when made."""

    level: str = PRIMARY
    replicas: int = 0
    timeout_ms: int = 0

    PRIMARY: ClassVar[Durability]

    def __post_init__(self) -> None:
        if self.level not in (PRIMARY, REPLICATED, FSYNCED):
            raise ValidationError(
                f"durability level must be 'primary', 'replicated' or 'fsynced', got {self.level!r}"
            )
        if self.level == PRIMARY:
            if self.replicas or self.timeout_ms:
                raise ValidationError("Durability.PRIMARY waits for nothing: it takes no values")
            return
        least = 1 if self.level == REPLICATED else 0
        _check_int("replicas", self.replicas, least, MAX_REPLICAS, self.level)
        _check_int("timeout_ms", self.timeout_ms, 1, MAX_TIMEOUT_MS, self.level)

    @classmethod
    def replicated(cls, replicas: int = 1, timeout_ms: int = 1000) -> Durability:
        """Each write waits until ``replicas`` replicas (1 or more) acknowledged it, for
        at most ``timeout_ms`` (1 to 60000)."""
        return cls(REPLICATED, replicas, timeout_ms)

    @classmethod
    def fsynced(cls, replicas: int = 0, timeout_ms: int = 1000) -> Durability:
        """Each write waits until the primary fsynced it to its append-only file, and
        ``replicas`` replicas (0 or more) too, for at most ``timeout_ms`` (1 to 60000).
        Needs ``appendonly yes`` and Redis 7.2+ or Valkey."""
        return cls(FSYNCED, replicas, timeout_ms)

    @property
    def waits(self) -> bool:
        """Whether a write at this level is followed by a wait."""
        return self.level != PRIMARY

    def command(self) -> tuple[str | int, ...]:
        """The command that follows a write at this level (not for PRIMARY)."""
        if self.level == REPLICATED:
            return ("WAIT", self.replicas, self.timeout_ms)
        return ("WAITAOF", 1, self.replicas, self.timeout_ms)

    def check_server(self, shown: str) -> None:
        """Refuse this level, before anything is sent, on a server without its command
        (``shown``: its ``redis_version``; Valkey reports 7.2.4 or newer)."""
        version = tuple(int(part) for part in re.findall(r"\d+", shown)[:2])
        if self.level == FSYNCED and version < FSYNC_VERSION:
            raise DurabilityUnsupportedError(
                f"Durability.fsynced needs WAITAOF, which Redis {shown} does not have "
                "(Redis 7.2 or newer, or Valkey, has it); upgrade the server, or use "
                "Durability.replicated(...) to wait for replicas instead. Nothing was sent."
            )

    def verdict(self, answer: Any, operation: str) -> NotDurableError | None:
        """None when ``answer`` (the reply of :meth:`command`, or the error Redis answered
        it with) says this level was reached; else the error to raise for ``operation``."""
        if isinstance(answer, Exception):
            return self._missed(operation, 0, None, f"; the server refused the wait: {answer}")
        if self.level == REPLICATED:
            reached = int(answer)
            return None if reached >= self.replicas else self._missed(operation, reached, None)
        local, reached = int(answer[0]), int(answer[1])
        if local >= 1 and reached >= self.replicas:
            return None
        return self._missed(operation, reached, local >= 1)

    def _missed(
        self, operation: str, reached: int, fsynced: bool | None, extra: str = ""
    ) -> NotDurableError:
        local = ""
        if fsynced is not None:
            local = "was fsynced on the primary" if fsynced else "was not fsynced on the primary"
            local += " and "
        return NotDurableError(
            f"{operation} WAS applied on the primary but {local}reached {reached} of "
            f"{self.replicas} replicas within {self.timeout_ms} ms{extra}, so it may or may "
            "not survive a failover. Read it back to see, or send it again if that is safe "
            "(an invoke with an idempotency key, a complete, fail or ack are); check the "
            "replicas (INFO replication), or ask for fewer replicas or a longer timeout_ms.",
            operation=operation,
            wanted=self.replicas,
            reached=reached,
            timeout_ms=self.timeout_ms,
            fsynced=fsynced,
        )

    def __str__(self) -> str:
        if self.level == PRIMARY:
            return PRIMARY
        return f"{self.level}(replicas={self.replicas}, timeout_ms={self.timeout_ms})"


Durability.PRIMARY = Durability()

DurabilityLike = Durability | str
"""What a ``durability=`` argument takes: a level, or the name of one."""

_NAMED = {
    PRIMARY: Durability.PRIMARY,
    REPLICATED: Durability.replicated(),
    FSYNCED: Durability.fsynced(),
}


def as_durability(value: object, what: str = "durability") -> Durability:
    """``value`` as a level: a :class:`Durability`, or ``"primary"``, ``"replicated"`` or
    ``"fsynced"`` (each level's defaults); :class:`ValidationError` for anything else."""
    if isinstance(value, Durability):
        return value
    if isinstance(value, str) and value in _NAMED:
        return _NAMED[value]
    raise ValidationError(
        f"{what} must be a Durability (Durability.PRIMARY, Durability.replicated(...), "
        f"Durability.fsynced(...)) or 'primary', 'replicated' or 'fsynced', got {value!r}"
    )


def worker_durability(value: object) -> Durability | None:
    """A worker's level for its reports: None (its client's) or :func:`as_durability`'s."""
    return None if value is None else as_durability(value, "a worker's durability")
