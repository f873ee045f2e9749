"""A run's bytes (input, output, progress) as people and programs read them, and its
durations as people read them (:func:`span`).

People get :func:`shown`: pretty JSON when the bytes are JSON, the text when they are
UTF-8 (and hold no NUL), a hex dump otherwise, each cut at a size (:data:`SHOWN_BYTES`
of text, a quarter of that as hex) with how many bytes were left out. Programs get
:func:`encoded`: the text with ``"encoding": "utf-8"`` when the bytes are UTF-8, else
base64, always whole, so ``.encode()`` / ``base64.b64decode`` gives the bytes back.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any

SHOWN_BYTES = 64 * 1024
HEX_SHOWN = SHOWN_BYTES // 4
_PRETTY_MAX = 4 * 1024 * 1024  # JSON larger than this is shown as text, not parsed


@dataclass(frozen=True, slots=True)
class Shown:
    """Bytes as shown: ``kind`` is ``"json"``, ``"text"`` or ``"hex"``; ``text`` what
    to print; ``more`` how many bytes were left out; ``size`` the bytes' length."""

    kind: str
    text: str
    more: int
    size: int

    @property
    def note(self) -> str:
        """ "… N bytes more" when something was left out, else ""."""
        return f"… {self.more} bytes more" if self.more else ""


def shown(raw: bytes, limit: int = SHOWN_BYTES) -> Shown:
    """``raw`` for people (module docstring), at most ``limit`` bytes of its text."""
    size = len(raw)
    try:
        text = raw.decode("utf-8")
        if b"\0" in raw:  # UTF-8, but no text: binary that happens to decode
            raise UnicodeDecodeError("utf-8", raw, 0, 1, "control characters")
    except UnicodeDecodeError:
        cut = raw[: limit // 4]
        return Shown("hex", hexdump(cut), size - len(cut), size)
    kind = "text"
    if size <= _PRETTY_MAX and raw.lstrip()[:1] in (b"{", b"["):
        try:
            text = json.dumps(json.loads(text), indent=2, ensure_ascii=False)
            kind = "json"
        except (ValueError, RecursionError):
            pass
    data = text.encode()
    if len(data) <= limit:
        return Shown(kind, text, 0, size)
    head = data[:limit].decode("utf-8", errors="ignore")  # never half a character
    return Shown(kind, head, len(data) - len(head.encode()), size)


def hexdump(raw: bytes, width: int = 16) -> str:
    """``raw`` as lines of ``width`` bytes: offset, hex, and the printable ASCII."""
    lines = []
    for at in range(0, len(raw), width):
        chunk = raw[at : at + width]
        ascii_ = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        lines.append(f"{at:08x}  {chunk.hex(' '):<{width * 3 - 1}}  {ascii_}")
    return "\n".join(lines)


def encoded(raw: bytes | None) -> dict[str, Any] | None:
    """``raw`` whole, for JSON: ``{"encoding": "utf-8" | "base64", "data", "size"}``;
    None stays None."""
    if raw is None:
        return None
    try:
        return {"encoding": "utf-8", "data": raw.decode("utf-8"), "size": len(raw)}
    except UnicodeDecodeError:
        return {"encoding": "base64", "data": base64.b64encode(raw).decode(), "size": len(raw)}


def decoded(value: dict[str, Any]) -> bytes:
    """The bytes :func:`encoded` gave ``value`` for."""
    if value["encoding"] == "base64":
        return base64.b64decode(value["data"])
    return str(value["data"]).encode()


def span(ms: int) -> str:
    """A duration for people: "850 ms", "1.2 s", "4.5 min", "2.0 h"."""
    if ms < 1000:
        return f"{ms} ms"
    for unit, size in (("h", 3_600_000), ("min", 60_000)):
        if ms >= size:
            return f"{ms / size:.1f} {unit}"
    return f"{ms / 1000:.1f} s"
