"""Validation of stream arguments and decoding of the stream scripts' replies."""

from __future__ import annotations

from collections.abc import Sequence

import msgpack

from flo_redis._wire.checks import check_count, validate_block_ms
from flo_redis._wire.codec import BadRecord, pack
from flo_redis.errors import ValidationError, ValueTooLargeError
from flo_redis.types import StreamID, StreamRecord
from flo_redis.types.base import LUA_INT

MAX_COUNT = 1000
DEFAULT_COUNT = 100  # records, entries or dead letters a read answers unless told
MAX_HEADERS_BYTES = 65535


def count_arg(what: str, value: object, default: int) -> int:
    if value is None:
        return default
    return check_count(what, value, 1, MAX_COUNT)


def block_ms_arg(value: int | None) -> int:
    if value is None:
        return 0
    validate_block_ms(value)
    return value


def stream_id_arg(what: str, value: object) -> StreamID:
    if not isinstance(value, StreamID):
        raise ValidationError(f"{what} must be a StreamID, got {type(value).__name__}")
    try:
        value.__post_init__()  # a StreamID mutated after construction is checked again
    except ValueError as exc:
        raise ValidationError(f"{what} is not a valid StreamID: {exc}") from exc
    return value


def ids_arg(ids: Sequence[StreamID]) -> list[str]:
    if isinstance(ids, StreamID | str | bytes) or not isinstance(ids, Sequence):
        raise ValidationError(f"ids must be a list of StreamID, got {type(ids).__name__}")
    return [stream_id_arg(f"ids[{i}]", sid).to_redis() for i, sid in enumerate(ids)]


def headers_arg(headers: object) -> bytes:
    if headers is None:
        return b""
    if not isinstance(headers, dict):
        raise ValidationError(f"headers must be a dict[str, str], got {type(headers).__name__}")
    if not headers:
        return b""
    for key, value in headers.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise ValidationError(f"headers must map str to str, got {key!r}: {value!r}")
    packed = pack(headers)
    if len(packed) > MAX_HEADERS_BYTES:
        raise ValueTooLargeError(
            f"headers are {len(packed)} bytes packed; the limit is {MAX_HEADERS_BYTES}"
        )
    return packed


def decode_headers(raw: bytes) -> dict[str, str] | None:
    """A record's headers (None when it has none); :class:`BadRecord` when its stored
    headers are not a msgpack map (with UTF-8 strings)."""
    if not raw:
        return None
    try:
        data = msgpack.unpackb(raw, raw=False)
    except Exception as exc:  # msgpack raises ValueError, TypeError, ... on bad bytes
        raise BadRecord(f"headers are not msgpack ({type(exc).__name__}: {exc})") from None
    if not isinstance(data, dict):
        raise BadRecord("headers are not a msgpack map")
    return {str(k): str(v) for k, v in data.items()}


def sid(raw: bytes | str) -> StreamID:
    """An id Redis wrote (``"ms-seq"``, both below 2**64). Its two numbers are read
    without the checks a caller's id gets; anything else is parsed by
    :meth:`StreamID.from_redis`."""
    # A script's reply is bytes (the common case, a hundred a batch); a str is read as
    # its UTF-8, whose non-ASCII characters are never digits.
    data = raw if isinstance(raw, bytes) else raw.encode(errors="replace")
    ms, _, seq = data.partition(b"-")  # bytes.isdigit: ASCII digits only
    if ms.isdigit() and seq.isdigit():
        parsed = _new(StreamID)
        parsed.timestamp_ms = int(ms)
        parsed.sequence = int(seq)
        return parsed
    return StreamID.from_redis(raw)


_new = object.__new__


def positive_arg(what: str, value: object, high: int = LUA_INT) -> int:
    """An int in [1, ``high``]; 2**53 unless told, what a script holds exactly (it
    computes in doubles)."""
    return check_count(what, value, 1, high)


def merge(batches: Sequence[list[StreamRecord]], count: int, tail: bool) -> list[StreamRecord]:
    """Records of several partitions in id order (ties by partition): the first ``count``,
    or with ``tail`` the last ``count``."""
    merged = sorted(
        (r for batch in batches for r in batch), key=lambda r: (r.id.as_tuple(), r.partition)
    )
    return merged[-count:] if tail else merged[:count]
