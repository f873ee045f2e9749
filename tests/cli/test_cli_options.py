"""Every number the ``flo-redis`` commands take (seconds, ms, counts, ports) is checked as
the arguments are parsed: nan, inf, a negative or a too-large value is a usage error (exit
2) whose one ``Error:`` line names the option and what it takes, before anything is sent
— no run created, no worker registered, no traceback."""

from __future__ import annotations

import pytest
from cli_runner import cli, with_client
from click.testing import CliRunner, Result

from flo_redis import FloClient
from flo_redis.cli import main
from flo_redis.types import WorkerListOptions


def refused(result: Result, *wanted: str) -> str:
    """The one error line of a usage error (exit 2), which says each of ``wanted``."""
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, result.output
    for text in wanted:
        assert text in errors[0], errors[0]
    return errors[0]


def runs_of(redis_url: str, namespace: str, action: str) -> int:
    async def count(client: FloClient) -> int:
        c = await client.action.counts(action)
        return c.pending + c.delayed + c.running + c.completed + c.failed + c.timed_out

    return with_client(redis_url, namespace, count)


@pytest.fixture
def action(redis_url: str, namespace: str) -> str:
    with_client(redis_url, namespace, lambda c: c.action.register("ok"))
    return "ok"


@pytest.mark.parametrize("timeout", ["100000", "86400.5", "inf", "nan", "-1", "1e400"])
def test_a_wait_timeout_out_of_range_is_refused_before_the_run_is_created(
    redis_url: str, namespace: str, action: str, timeout: str
) -> None:
    result = cli(redis_url, namespace, "invoke", action, "--data", "{}", "--wait",
                 "--timeout", timeout)  # fmt: skip
    refused(result, "'--timeout'", "seconds, 0 to 86400", repr(timeout))
    assert runs_of(redis_url, namespace, action) == 0


def test_a_wait_timeout_in_range_is_taken_in_seconds(
    redis_url: str, namespace: str, action: str
) -> None:
    result = cli(redis_url, namespace, "invoke", action, "--wait", "--timeout", "0.2")
    assert result.exit_code == 2  # no worker: not finished in time
    assert "not finished after 0.2 s (it is PENDING)" in result.output
    assert runs_of(redis_url, namespace, action) == 1


@pytest.mark.parametrize(
    ("args", "wanted"),
    [
        (["--delay", "253402300800"], ["'--delay'", "seconds, 0 to 2.53402e+11"]),
        (["--delay", "nan"], ["'--delay'"]),
        (["--delay", "-1"], ["'--delay'"]),
        (["--priority", "256"], ["'--priority'", "0<=x<=255"]),
        (["--data", "@no-such-file.json"], ["'--data'", "cannot read 'no-such-file.json'"]),
        (["--data", "-"], ["'--data'", "not UTF-8 JSON"]),
        (["--idempotency-key", ""], ["'--idempotency-key'", "must not be empty"]),
    ],
)
def test_bad_invoke_options_create_no_run(
    redis_url: str, namespace: str, action: str, args: list[str], wanted: list[str]
) -> None:
    refused(cli(redis_url, namespace, "invoke", action, *args), *wanted)
    assert runs_of(redis_url, namespace, action) == 0


@pytest.mark.parametrize("interval", ["nan", "inf", "0", "3601"])
def test_a_status_interval_out_of_range_is_refused(
    redis_url: str, namespace: str, interval: str
) -> None:
    result = cli(redis_url, namespace, "status", "--watch", "-n", "2", "--interval", interval)
    refused(result, "'--interval'", "seconds, 0.1 to 3600")


@pytest.mark.parametrize("age", ["nan", "inf", "-1"])
def test_a_heartbeat_age_that_is_not_a_number_of_seconds_is_refused(
    redis_url: str, namespace: str, age: str
) -> None:
    # nan used to pass every heartbeat (no age is > nan): a probe that never fails.
    with_client(redis_url, namespace, lambda c: c.worker.register("w1", ["ok"]))
    result = CliRunner().invoke(
        main,
        ["check", "--url", redis_url, "--namespace", namespace, "--worker", "w1",
         "--max-heartbeat-age", age],
    )  # fmt: skip
    refused(result, "'--max-heartbeat-age'", "seconds, 0 or more")


def registered_workers(redis_url: str, namespace: str) -> int:
    async def listed(client: FloClient) -> int:
        return len((await client.worker.list(WorkerListOptions(limit=100))).workers)

    return with_client(redis_url, namespace, listed)


@pytest.mark.parametrize(
    ("args", "wanted"),
    [
        (["--shutdown-timeout", "nan"], ["'--shutdown-timeout'", "seconds, 0 or more"]),
        (["--shutdown-timeout", "inf"], ["'--shutdown-timeout'", "seconds, 0 or more"]),
        (["--shutdown-timeout", "-1"], ["'--shutdown-timeout'", "seconds, 0 or more"]),
        (["--processes", "99999999999999999999"], ["'--processes'", "1<=x<=1024"]),
        (["--processes", "1025"], ["'--processes'", "1<=x<=1024"]),
        (["--concurrency", "4294967296"], ["'--concurrency'", "1<=x<=4294967295"]),
        (["--durability", "sometimes"], ["'--durability'", "durability must be a Durability"]),
        (["--durability", "replicated:0"], ["'--durability'", "replicas must be an int from 1"]),
        (["--durability", "fsynced:1:0"], ["'--durability'", "timeout_ms must be an int"]),
        (["--metrics-port", "65535", "--processes", "2"],
         ["'--metrics-port'", "ports 65535 to 65536", "at most 65534"]),
        (["--processes", "3", "--metrics-port", "65534"],
         ["'--metrics-port'", "ports 65534 to 65536", "at most 65533"]),
    ],
)  # fmt: skip
def test_bad_worker_options_are_refused_before_anything_starts(
    redis_url: str, namespace: str, args: list[str], wanted: list[str]
) -> None:
    refused(cli(redis_url, namespace, "worker", *args, "cli_app:build"), *wanted)
    assert registered_workers(redis_url, namespace) == 0


def test_a_bad_number_from_the_environment_is_refused_alike(redis_url: str, namespace: str) -> None:
    result = CliRunner().invoke(
        main,
        ["worker", "--url", redis_url, "--namespace", namespace, "cli_app:build"],
        env={"FLO_REDIS_SHUTDOWN_TIMEOUT": "nan"},
    )
    refused(result, "'--shutdown-timeout'", "got 'nan'")
    assert registered_workers(redis_url, namespace) == 0


@pytest.mark.parametrize("origin", ["dash.example.com", "https://dash.example.com/admin"])
def test_a_dashboard_origin_that_is_not_one_is_refused(
    redis_url: str, namespace: str, origin: str
) -> None:
    result = cli(redis_url, namespace, "dashboard", "--port", "0", "--origin", origin)
    refused(result, "'--origin'", "https://dash.example.com", repr(origin))
