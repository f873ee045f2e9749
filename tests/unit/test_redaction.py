"""What the redactor hides of a run's values (``flo_redis.ops.redaction``), and how the
values are shown (``flo_redis.ops.payloads``): no Redis needed."""

from __future__ import annotations

import base64
import json
import os

import pytest

from flo_redis.errors import ValidationError
from flo_redis.ops.payloads import SHOWN_BYTES, decoded, encoded, shown, span
from flo_redis.ops.redaction import FAILED, Redactor, key_names, load_hook, redactor
from flo_redis.types import ActionRunStatus, RunStatus

SECRET = "hunter2"


def test_key_names_hide_members_at_any_depth_ignoring_case() -> None:
    hide = redactor(keys=" Password, token ,")
    assert hide.keys == ("password", "token")
    value = json.dumps(
        {"user": "ann", "PASSWORD": SECRET, "items": [{"access_token": SECRET, "n": 1}]}
    ).encode()
    shown_value = hide.value("input", value, "job:1")
    assert shown_value is not None and SECRET.encode() not in shown_value
    assert json.loads(shown_value) == {
        "user": "ann", "PASSWORD": "[redacted]", "items": [{"access_token": "[redacted]", "n": 1}],
    }  # fmt: skip
    # What is not JSON, or holds no such key, stays as it is (bytes for bytes, str for str).
    assert hide.value("input", b"password=x", "job:1") == b"password=x"
    assert hide.value("error", '{"a": 1}', "job:1") == '{"a": 1}'
    assert hide.value("input", None, "job:1") is None


def test_json_too_deep_to_walk_is_not_shown() -> None:
    deep = b"[" * 10_000 + b'{"password": "x"}' + b"]" * 10_000
    assert redactor(keys="password").value("input", deep, "job:1") == FAILED.encode()


def test_a_hook_sees_each_field_and_its_answer_is_shown() -> None:
    seen: list[tuple[str, object, str]] = []

    def hook(field: str, value: bytes | str, run_id: str) -> bytes | str:
        seen.append((field, value, run_id))
        return "hidden" if field == "input" else b"also hidden"

    hide = Redactor(hook=hook)
    run = ActionRunStatus(
        "job:1", RunStatus.FAILED, 1, 1, output=b"out", error_message="err",
        error_traceback="tb", progress=b"p",
    )  # fmt: skip
    shown_run = hide.run(run)
    assert (shown_run.output, shown_run.progress) == (b"also hidden", b"also hidden")
    assert (shown_run.error_message, shown_run.error_traceback) == ("also hidden", "also hidden")
    assert hide.value("input", b"in", "job:1") == b"hidden"  # str answered: as bytes
    assert {f for f, _, _ in seen} == {"output", "progress", "error", "traceback", "input"}
    assert ("error", "err", "job:1") in seen


@pytest.mark.parametrize("answer", [RuntimeError(SECRET), 42, None])
def test_a_hook_that_fails_shows_the_marker_never_the_value(
    answer: object, caplog: pytest.LogCaptureFixture
) -> None:
    def hook(field: str, value: bytes | str, run_id: str) -> object:
        if isinstance(answer, Exception):
            raise answer
        return answer

    hide = Redactor(hook=hook)
    assert hide.value("input", SECRET.encode(), "job:1") == FAILED.encode()
    assert hide.value("error", SECRET, "job:1") == FAILED
    assert caplog.records and all(SECRET not in r.getMessage() for r in caplog.records)


def test_a_hook_is_named_module_colon_function() -> None:
    assert load_hook("os.path:basename") is os.path.basename
    for spec, why in (("basename", "not 'module:function'"), (":x", "not 'module:function'"),
                      ("no_such_module_x:f", "does not import"), ("os:no_such", "has no"),
                      ("os:sep", "not callable")):  # fmt: skip
        with pytest.raises(ValidationError, match=why):
            load_hook(spec)
    assert key_names(None) == () and not redactor().active


def test_values_are_shown_as_json_text_or_hex() -> None:
    pretty = shown(b'{"a":[1,2],"b":"\xc3\xa9"}')
    assert (pretty.kind, pretty.text, pretty.more) == (
        "json",
        '{\n  "a": [\n    1,\n    2\n  ],\n  "b": "é"\n}',
        0,
    )
    assert shown(b"plain words").kind == "text"
    assert shown(b"{not json").kind == "text"
    binary = shown(b"\x00\x01abc\xff")
    assert binary.kind == "hex" and binary.text.startswith("00000000  00 01 61 62 63 ff")
    assert binary.text.endswith("..abc.")
    assert shown(b"nul\x00inside").kind == "hex"  # UTF-8, but no text


def test_a_large_value_is_cut_on_a_character_with_what_was_left_out() -> None:
    raw = ("é" * SHOWN_BYTES).encode()  # two bytes a character
    view = shown(raw)
    assert view.kind == "text" and len(view.text.encode()) == SHOWN_BYTES
    assert view.more == len(raw) - SHOWN_BYTES and view.note == f"… {view.more} bytes more"
    odd = shown(b"x" + raw)  # the cut falls inside a character: it is left out whole
    assert len(odd.text.encode()) == SHOWN_BYTES - 1 and odd.more == len(raw) + 1 - (
        SHOWN_BYTES - 1
    )
    hexed = shown(b"\xff" * SHOWN_BYTES)
    assert hexed.more == SHOWN_BYTES - SHOWN_BYTES // 4


def test_encoded_values_give_the_bytes_back() -> None:
    for raw in (b"", b"text", "é".encode(), os.urandom(300), b"\xff\xfe"):
        value = encoded(raw)
        assert value is not None and decoded(json.loads(json.dumps(value))) == raw
        assert value["size"] == len(raw)
    assert encoded(b"\xff")["encoding"] == "base64"  # type: ignore[index]
    assert encoded(b"\xff")["data"] == base64.b64encode(b"\xff").decode()  # type: ignore[index]
    assert encoded(None) is None


def test_durations_read_as_people_say_them() -> None:
    assert [span(ms) for ms in (0, 850, 1_234, 59_999, 270_000, 7_200_000)] == [
        "0 ms", "850 ms", "1.2 s", "60.0 s", "4.5 min", "2.0 h",
    ]  # fmt: skip
