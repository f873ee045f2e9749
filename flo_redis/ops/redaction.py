"""Hiding what an operator should not see of a run: its input, output, progress, error.

A deployment names what to hide in two ways, used by ``flo-redis runs show`` / ``find``
and the dashboard alike:

- key names (``--redact-keys password,token,secret``, env ``FLO_REDIS_REDACT_KEYS``):
  in a value that is JSON, every object member whose key holds one of them (ASCII case
  ignored: ``token`` hides ``access_token`` and ``Token``) shows ``"[redacted]"``;
- a hook (``--redact myapp.ops:redact``, env ``FLO_REDIS_REDACT``): a function
  ``redact(field, value, run_id)`` called for each value shown, with the field's name
  (:data:`FIELDS`), its value (bytes for input, output and progress; str for the error
  message and traceback) and the run's id; it answers what to show instead (bytes or
  str), after the key names were hidden.

A hook that raises, or answers something that is neither bytes nor str, never lets the
value through: ``"[redaction failed]"`` is shown in its place, and the failure is
logged with the exception's type only (its message could quote the value).
"""

from __future__ import annotations

import importlib
import json
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from flo_redis.errors import ValidationError
from flo_redis.types import ActionRunStatus

log = logging.getLogger("flo_redis.ops.redaction")

HOOK_ENV = "FLO_REDIS_REDACT"
KEYS_ENV = "FLO_REDIS_REDACT_KEYS"
FIELDS = ("input", "output", "progress", "error", "traceback")
REDACTED = "[redacted]"
FAILED = "[redaction failed]"

RedactHook = Callable[[str, Any, str], Any]
V = TypeVar("V", bytes, str)


@dataclass(frozen=True)
class Redactor:
    """What to hide (module docstring): key-name pieces (lowercase) and a hook."""

    keys: tuple[str, ...] = ()
    hook: RedactHook | None = None

    @property
    def active(self) -> bool:
        return bool(self.keys) or self.hook is not None

    def value(self, field: str, value: V | None, run_id: str) -> V | None:
        """``value`` of ``field`` as it may be shown (None stays None): of the same type,
        or the failure marker of that type."""
        if value is None or not self.active:
            return value
        kind = type(value)
        shown: Any = _hide_keys(value, self.keys) if self.keys else value
        if self.hook is not None:
            try:
                shown = self.hook(field, shown, run_id)
            except Exception as exc:
                log.warning("redaction hook failed on %s of %s: %s", field, run_id, _kind(exc))
                shown = FAILED
            if not isinstance(shown, bytes | str):
                log.warning(
                    "redaction hook answered %s for %s of %s, not bytes or str",
                    type(shown).__name__, field, run_id,
                )  # fmt: skip
                shown = FAILED
        if isinstance(shown, kind):
            return shown
        if isinstance(shown, str):
            return shown.encode()  # type: ignore[return-value]
        return shown.decode("utf-8", errors="replace")  # type: ignore[no-any-return]

    def run(self, run: ActionRunStatus) -> ActionRunStatus:
        """``run`` with its output, progress, error message and traceback as they may be
        shown."""
        if not self.active:
            return run
        rid = run.run_id
        return replace(
            run,
            output=self.value("output", run.output, rid),
            progress=self.value("progress", run.progress, rid),
            error_message=self.value("error", run.error_message, rid),
            error_traceback=self.value("traceback", run.error_traceback, rid),
        )


NOTHING = Redactor()


def _kind(exc: BaseException) -> str:
    return type(exc).__qualname__


def _hide_keys(value: V, keys: tuple[str, ...]) -> V:
    """``value`` with the members named by ``keys`` hidden, when it is JSON; as is when
    it is not; the failure marker for JSON nested too deep to be walked (it could hold
    a member to hide)."""
    try:
        data = json.loads(value)
    except ValueError:
        return value
    except RecursionError:
        return _failed(value)
    try:
        hidden, changed = _hidden(data, keys)
        if not changed:
            return value
        text = json.dumps(hidden, ensure_ascii=False)
    except RecursionError:
        return _failed(value)
    return text.encode() if isinstance(value, bytes) else text


def _failed(value: V) -> V:
    log.warning("redaction failed: a JSON value nested too deep to look through")
    return FAILED.encode() if isinstance(value, bytes) else FAILED


def _hidden(data: Any, keys: tuple[str, ...]) -> tuple[Any, bool]:
    if isinstance(data, dict):
        out: dict[str, Any] = {}
        changed = False
        for key, item in data.items():
            if any(k in key.lower() for k in keys):
                out[key], changed = REDACTED, True
            else:
                out[key], inner = _hidden(item, keys)
                changed = changed or inner
        return out, changed
    if isinstance(data, list):
        items = [_hidden(item, keys) for item in data]
        return [i for i, _ in items], any(c for _, c in items)
    return data, False


def key_names(spec: str | Iterable[str] | None) -> tuple[str, ...]:
    """Key-name pieces from ``"password,token"`` (or a list), lowercased, blanks left
    out."""
    if spec is None:
        return ()
    parts = spec.split(",") if isinstance(spec, str) else list(spec)
    return tuple(dict.fromkeys(p.strip().lower() for p in parts if p.strip()))


def load_hook(spec: str) -> RedactHook:
    """The function ``spec`` names (``"package.module:function"``), imported.
    :class:`ValidationError` saying what is wrong: not that shape, a module that does
    not import, no such attribute, or not callable."""
    module_name, sep, attr = spec.strip().partition(":")
    if not sep or not module_name or not attr:
        raise ValidationError(
            f"redaction hook {spec!r} is not 'module:function' (like myapp.ops:redact)"
        )
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise ValidationError(
            f"redaction hook {spec!r}: module {module_name!r} does not import "
            f"({_kind(exc)}: {exc}); check the name and that it is on PYTHONPATH"
        ) from None
    target: Any = module
    for part in attr.split("."):
        target = getattr(target, part, None)
        if target is None:
            raise ValidationError(f"redaction hook {spec!r}: {module_name} has no {attr!r}")
    if not callable(target):
        raise ValidationError(f"redaction hook {spec!r} is not callable")
    return target  # type: ignore[no-any-return]


def redactor(hook: str | None = None, keys: str | Iterable[str] | None = None) -> Redactor:
    """The redactor a deployment asked for: ``hook`` (``"module:function"``) and
    ``keys`` (``"password,token"``); None or empty for either: not that one."""
    return Redactor(key_names(keys), load_hook(hook) if hook else None)
