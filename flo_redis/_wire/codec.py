"""Encoding between Python and the Lua scripts: msgpack records and type-tagged labels.

Scripts use Redis's ``cmsgpack``, which knows only the original msgpack string type, so
records are packed without the bin type and unpacked with ``raw=True``: user payloads stay
bytes, untouched; record keys are ASCII and decoded here.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

import msgpack

from flo_redis.errors import ValidationError

MAX_LABELS_BYTES = 65535


def pack(value: Any) -> bytes:
    """msgpack for a script argument (strings as raw, as cmsgpack expects)."""
    return msgpack.packb(value, use_bin_type=False)


def present(**fields: Any) -> dict[str, Any]:
    """The ``fields`` that are not None: a stored record's optional entries, left out
    of the record while unset."""
    return {name: value for name, value in fields.items() if value is not None}


class BadRecord(ValueError):
    """A stored record that does not decode, or does not hold what it must; the message
    says why."""


def unpack_record(raw: object) -> dict[str, Any]:
    """A record written by a script: keys as str, string values as bytes.
    :class:`BadRecord` for bytes that are not one msgpack map with string keys."""
    if not isinstance(raw, bytes):
        raise BadRecord(f"not bytes: {type(raw).__name__}")
    try:
        data = msgpack.unpackb(raw, raw=True, strict_map_key=False)
    except Exception as exc:  # msgpack raises ValueError, TypeError, ... on bad bytes
        raise BadRecord(f"not msgpack ({type(exc).__name__}: {exc})") from None
    if not isinstance(data, dict):
        raise BadRecord("not a msgpack map")
    try:
        return {k.decode() if isinstance(k, bytes) else str(k): v for k, v in data.items()}
    except UnicodeDecodeError:
        raise BadRecord("a key is not UTF-8") from None


def decoded(value: object) -> str:
    """A name read back from Redis (bytes: the client never decodes replies) as str."""
    return value.decode() if isinstance(value, bytes) else str(value)


def text(value: Any) -> str | None:
    """A record's string field as str (None stays None)."""
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return str(value)


def _tag(value: Any) -> str:
    # bool before int: True is an int in Python but a different JSON type.
    if isinstance(value, bool):
        return "b:true" if value else "b:false"
    if isinstance(value, int):
        return f"i:{value}"
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValidationError(f"label value {value!r} is not a finite number")
        return f"f:{value!r}"
    if isinstance(value, str):
        return f"s:{value}"
    if value is None:
        return "n:"
    return "x:"  # arrays and objects never match


def tag_labels(labels: Mapping[str, Any]) -> dict[str, str]:
    """Labels as type-tagged strings, so int 1, float 1.0, "1" and true all differ."""
    if not isinstance(labels, Mapping):
        raise ValidationError(f"labels must be a dict, got {type(labels).__name__}")
    size = len(json.dumps(labels, separators=(",", ":"), default=str))
    if size > MAX_LABELS_BYTES:
        raise ValidationError(f"labels are {size} bytes of JSON; the limit is {MAX_LABELS_BYTES}")
    tagged: dict[str, str] = {}
    for key, value in labels.items():
        if not isinstance(key, str):
            raise ValidationError(f"label keys must be str, got {key!r}")
        tagged[key] = _tag(value)
    return tagged


def worker_labels(metadata: str | bytes | None) -> dict[str, str] | None:
    """A worker's labels: the top-level object of its registration metadata JSON."""
    if not metadata:
        return None
    try:
        data = json.loads(metadata)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    return {str(k): _tag(v) for k, v in data.items()}


def check_metadata(metadata: str | None) -> None:
    """Refuse registration metadata that is not JSON."""
    if metadata is None:
        return
    if not isinstance(metadata, str):
        raise ValidationError(f"metadata must be a JSON string, got {type(metadata).__name__}")
    try:
        json.loads(metadata)
    except ValueError as exc:
        raise ValidationError(f"metadata is not valid JSON: {exc}") from exc
