"""``flo-redis runs show`` and ``runs find`` through the real command: a run's input and
times for people, the input whole in ``--json``, what ``--redact`` hides, and finding a
run by id, idempotency key or error text."""

from __future__ import annotations

import base64
import json
import textwrap
from pathlib import Path
from typing import Any

import pytest
from cli_command import flo_redis
from cli_runner import with_client

from flo_redis import (
    ActionInvokeOptions,
    ActionRegisterOptions,
    FloClient,
    WorkerAwaitOptions,
    WorkerFailOptions,
)

NOW = WorkerAwaitOptions(block_ms=0)
SECRET = "hunter2-secret"
TRACEBACK = "Traceback (most recent call last):\n  File \"app.py\", line 3\nKeyError: 'size'"
BINARY = bytes(range(256))


@pytest.fixture
def runs(redis_url: str, namespace: str) -> dict[str, Any]:
    """Action 'resize': a run failed with a traceback (JSON input holding a password and an
    idempotency key), a waiting run with binary input, a waiting run with 70,000 bytes of
    text, and a completed one."""

    async def build(client: FloClient) -> dict[str, Any]:
        await client.action.register("resize", options=ActionRegisterOptions(max_retries=1))
        await client.worker.register("w1", ["resize"])
        payload = json.dumps({"user": "ann", "password": SECRET, "size": 4096}).encode()
        failed = await client.action.invoke(
            "resize", payload, ActionInvokeOptions(idempotency_key="order-42")
        )
        await client.worker.await_tasks("w1", ["resize"], 1, NOW)
        await client.worker.fail(
            "w1", "resize", failed.run_id, f"KeyError: 'size' for {SECRET}",
            WorkerFailOptions(retry=False, traceback=TRACEBACK),
        )  # fmt: skip
        done = await client.action.invoke("resize", b"small")
        await client.worker.await_tasks("w1", ["resize"], 1, NOW)
        await client.worker.complete("w1", "resize", done.run_id, b'{"ok": true}')
        binary = await client.action.invoke("resize", BINARY)
        big = await client.action.invoke("resize", b"x" * 70_000)
        return {
            "failed": failed.run_id,
            "done": done.run_id,
            "binary": binary.run_id,
            "big": big.run_id,
            "payload": payload,
        }

    return with_client(redis_url, namespace, build)


def ok(done: Any) -> str:
    assert done.returncode == 0, done.stderr
    assert done.stderr == "", done.stderr
    return str(done.stdout)


def test_show_prints_the_input_times_and_traceback(
    redis_url: str, namespace: str, runs: dict[str, Any]
) -> None:
    shown = ok(flo_redis(redis_url, namespace, "runs", "show", runs["failed"], "--wide"))
    assert "input (json, " in shown and '"password": "hunter2-secret"' in shown
    assert '{\n  "user": "ann",' in shown  # pretty JSON
    assert "order-42" in shown  # its idempotency key
    assert TRACEBACK in shown and "KeyError: 'size' for" in shown
    created = next(line for line in shown.splitlines() if "│ created " in line)
    assert " UTC (" in created and " ago)" in created  # "2026-12-06 13:42:55 UTC (4s ago)"
    finished = next(line for line in shown.splitlines() if "│ finished " in line)
    assert " after started" in finished
    assert "at (ms)" not in shown  # no raw milliseconds for people


def test_show_gives_binary_as_hex_and_cuts_a_large_input(
    redis_url: str, namespace: str, runs: dict[str, Any]
) -> None:
    binary = ok(flo_redis(redis_url, namespace, "runs", "show", runs["binary"]))
    assert "input (hex, 256 bytes):" in binary
    assert "00000000  00 01 02 03" in binary
    big = ok(flo_redis(redis_url, namespace, "runs", "show", runs["big"]))
    assert "input (text, 70000 bytes):" in big
    assert f"… {70_000 - 65_536} bytes more" in big
    done = ok(flo_redis(redis_url, namespace, "runs", "show", runs["done"]))
    assert "output (json, 12 bytes):" in done
    assert (
        "input: not kept: completed runs keep their input only with keep_inputs=True "
        "(ActionRegisterOptions)"
    ) in done


def test_show_gives_a_completed_runs_kept_input(redis_url: str, namespace: str) -> None:
    async def build(client: FloClient) -> tuple[str, str]:
        await client.action.register("kept", options=ActionRegisterOptions(keep_inputs=True))
        await client.worker.register("w1", ["kept"])
        run = await client.action.invoke("kept", b'{"user": "ann", "size": 4096}')
        await client.worker.await_tasks("w1", ["kept"], 1, NOW)
        await client.worker.complete("w1", "kept", run.run_id, b'{"ok": true}')
        return run.run_id, (await client.action.status(run.run_id)).status.name

    run_id, status = with_client(redis_url, namespace, build)
    assert status == "COMPLETED"
    shown = ok(flo_redis(redis_url, namespace, "runs", "show", run_id))
    assert "input (json, 29 bytes):" in shown and '"user": "ann"' in shown
    assert "not kept" not in shown and "output (json, 12 bytes):" in shown
    data = json.loads(ok(flo_redis(redis_url, namespace, "runs", "show", run_id, "--json")))
    assert data["input"]["data"] == '{"user": "ann", "size": 4096}'
    assert (data["status"], data["input_missing"]) == ("COMPLETED", None)


def test_show_json_keeps_ms_and_gives_the_input_back_exactly(
    redis_url: str, namespace: str, runs: dict[str, Any]
) -> None:
    data = json.loads(ok(flo_redis(redis_url, namespace, "runs", "show", runs["failed"], "--json")))
    assert isinstance(data["created_at_ms"], int) and isinstance(data["completed_at_ms"], int)
    assert data["input"]["encoding"] == "utf-8"
    assert data["input"]["data"].encode() == runs["payload"]
    assert data["idempotency_key"] == "order-42"
    assert data["error_traceback"] == TRACEBACK
    binary = json.loads(
        ok(flo_redis(redis_url, namespace, "runs", "show", runs["binary"], "--json"))
    )
    assert binary["input"]["encoding"] == "base64"
    assert base64.b64decode(binary["input"]["data"]) == BINARY
    done = json.loads(ok(flo_redis(redis_url, namespace, "runs", "show", runs["done"], "--json")))
    assert done["input"] is None
    assert done["input_missing"].startswith("not kept: completed runs keep their input only")
    big = json.loads(ok(flo_redis(redis_url, namespace, "runs", "show", runs["big"], "--json")))
    assert big["input"]["data"] == "x" * 70_000  # whole: --json is for programs


def test_redact_keys_hide_json_members_in_text_and_json(
    redis_url: str, namespace: str, runs: dict[str, Any]
) -> None:
    run = runs["failed"]
    for env, args in (({}, ["--redact-keys", "PASSWORD,token"]),
                      ({"FLO_REDIS_REDACT_KEYS": "password"}, [])):  # fmt: skip
        shown = ok(flo_redis(redis_url, namespace, "runs", "show", run, *args, env=env))
        assert '"password": "[redacted]"' in shown and '"user": "ann"' in shown
        as_json = ok(flo_redis(redis_url, namespace, "runs", "show", run, "--json", *args, env=env))
        assert SECRET not in json.loads(as_json)["input"]["data"]


def hook_module(tmp_path: Path) -> dict[str, str]:
    """A module of redaction hooks, and the environment that finds it."""
    (tmp_path / "redactors.py").write_text(
        textwrap.dedent(
            """
            def hide_secret(field, value, run_id):
                if isinstance(value, bytes):
                    return value.replace(b"hunter2-secret", b"***")
                return value.replace("hunter2-secret", "***") + f" [{field} of {run_id}]"

            def broken(field, value, run_id):
                raise RuntimeError(f"cannot redact {value!r}")

            def wrong(field, value, run_id):
                return 42
            """
        )
    )
    return {"PYTHONPATH": str(tmp_path)}


def test_a_redaction_hook_applies_to_input_error_and_json(
    redis_url: str, namespace: str, runs: dict[str, Any], tmp_path: Path
) -> None:
    env = hook_module(tmp_path)
    run = runs["failed"]
    args = ("runs", "show", run, "--redact", "redactors:hide_secret")
    shown = ok(flo_redis(redis_url, namespace, *args, env=env))
    assert SECRET not in shown
    assert '"password": "***"' in shown and f"KeyError: 'size' for *** [error of {run}]" in shown
    data = json.loads(ok(flo_redis(redis_url, namespace, *args, "--json", env=env)))
    assert SECRET not in json.dumps(data)
    by_env = flo_redis(
        redis_url,
        namespace,
        "runs",
        "show",
        run,
        env={**env, "FLO_REDIS_REDACT": "redactors:hide_secret"},
    )
    assert SECRET not in ok(by_env) and "***" in by_env.stdout


@pytest.mark.parametrize("hook", ["broken", "wrong"])
def test_a_hook_that_fails_never_lets_the_value_through(
    redis_url: str, namespace: str, runs: dict[str, Any], tmp_path: Path, hook: str
) -> None:
    env = hook_module(tmp_path)
    args = ("runs", "show", runs["failed"], "--redact", f"redactors:{hook}")
    shown = flo_redis(redis_url, namespace, *args, env=env)
    assert shown.returncode == 0
    assert SECRET not in shown.stdout + shown.stderr  # the log names the exception's type only
    assert "[redaction failed]" in shown.stdout
    data = flo_redis(redis_url, namespace, *args, "--json", env=env)
    assert SECRET not in data.stdout + data.stderr
    assert json.loads(data.stdout)["input"]["data"] == "[redaction failed]"


def test_a_hook_that_is_not_there_is_a_usage_error(
    redis_url: str, namespace: str, runs: dict[str, Any]
) -> None:
    for spec, why in (("nowhere:hide", "does not import"), ("json", "is not 'module:function'"),
                      ("json:no_such", "has no 'no_such'")):  # fmt: skip
        done = flo_redis(redis_url, namespace, "runs", "show", runs["failed"], "--redact", spec)
        assert done.returncode == 2 and why in done.stderr, done.stderr


def test_find_by_error_text_idempotency_key_and_run_id(
    redis_url: str, namespace: str, runs: dict[str, Any]
) -> None:
    failed = runs["failed"]
    by_error = ok(flo_redis(redis_url, namespace, "runs", "find", "resize", "keyerror", "--wide"))
    assert failed in by_error and " error " in by_error
    data = json.loads(
        ok(flo_redis(redis_url, namespace, "runs", "find", "resize", "order-42", "--json"))
    )
    assert [(r["run_id"], r["found_by"]) for r in data["runs"]] == [(failed, "idempotency key")]
    assert data["cursor"] is None and data["examined"] >= 1
    by_id = json.loads(
        ok(flo_redis(redis_url, namespace, "runs", "find", "resize", runs["big"], "--json"))
    )
    assert [(r["run_id"], r["found_by"]) for r in by_id["runs"]] == [(runs["big"], "run id")]
    none = ok(flo_redis(redis_url, namespace, "runs", "find", "resize", "no such text"))
    assert "no run of resize matches 'no such text'" in none


def test_runs_list_hides_what_the_hook_hides(
    redis_url: str, namespace: str, runs: dict[str, Any], tmp_path: Path
) -> None:
    args = ("runs", "list", "resize", "--state", "failed", "--redact", "redactors:hide_secret")
    for extra in ((), ("--json",)):
        done = ok(flo_redis(redis_url, namespace, *args, *extra, env=hook_module(tmp_path)))
        assert runs["failed"] in done and SECRET not in done


def test_find_hides_what_the_hook_hides(
    redis_url: str, namespace: str, runs: dict[str, Any], tmp_path: Path
) -> None:
    args = ("runs", "find", "resize", "keyerror", "--redact", "redactors:hide_secret")
    for extra in ((), ("--json",)):
        done = ok(flo_redis(redis_url, namespace, *args, *extra, env=hook_module(tmp_path)))
        assert runs["failed"] in done and SECRET not in done


def test_find_pages_with_a_cursor(redis_url: str, namespace: str, runs: dict[str, Any]) -> None:
    def find(*args: str) -> Any:
        search = ("runs", "find", "resize", "nothing", *args, "--json")
        return json.loads(ok(flo_redis(redis_url, namespace, *search)))

    first = find("--scan", "2")
    assert first["examined"] == 2 and first["cursor"]
    people = ok(flo_redis(redis_url, namespace, "runs", "find", "resize", "nothing", "--scan", "2"))
    assert f"more: --cursor '{first['cursor']}'" in people
    rest = find("--cursor", first["cursor"])
    assert rest["cursor"] is None and rest["examined"] == 2  # 4 runs in all
    bad = flo_redis(redis_url, namespace, "runs", "find", "resize", "x", "--cursor", "nowhere")
    assert bad.returncode == 1 and "cursor" in bad.stderr


def test_find_names_a_typo_d_action(redis_url: str, namespace: str, runs: dict[str, Any]) -> None:
    done = flo_redis(redis_url, namespace, "runs", "find", "resise", "boom")
    assert done.returncode == 1
    assert "no action 'resise'" in done.stderr and "did you mean 'resize'" in done.stderr
