"""``redis+sentinel://`` URLs: read into sentinels, service, database and the settings of
each kind of connection; a bad one refused, before anything connects, with a message
that names the fault and never the password."""

from __future__ import annotations

import pytest

from flo_redis import FloClient
from flo_redis._session.endpoint import normalize_endpoint, redact
from flo_redis._session.sentinel import is_sentinel_endpoint, no_primary, parse_sentinel_endpoint
from flo_redis.errors import InvalidEndpointError
from flo_redis.sync import SyncFloClient

SECRET = "s3cr3t-pw"


def _read(url: str):  # type: ignore[no-untyped-def]
    return parse_sentinel_endpoint(normalize_endpoint(url), redact(url))


def test_sentinels_service_and_database() -> None:
    target = _read("redis+sentinel://a.example:26380,[::1]:26381,b.example/shop/3")
    assert _read("redis+sentinel://[::1]:26380/shop").sentinels == (("::1", 26380),)
    assert target.sentinels == (("a.example", 26380), ("::1", 26381), ("b.example", 26379))
    assert target.service == "shop"
    assert target.options["db"] == 3
    assert not target.tls
    assert target.addresses == "a.example:26380,::1:26381,b.example:26379"
    assert _read("redis+sentinel://h:1/shop").options["db"] == 0


def test_data_and_sentinel_credentials_are_kept_apart() -> None:
    url = (
        f"redis+sentinel://app:{SECRET}@h1:26379,h2:26379/shop"
        "?sentinel_username=watcher&sentinel_password=other%20pw%2541"
    )
    target = _read(url)
    assert target.options["username"] == "app" and target.options["password"] == SECRET
    assert target.sentinel_auth == {"username": "watcher", "password": "other pw%41"}
    sentinel = target.sentinel_settings({"socket_timeout": 2.0})
    assert sentinel == {"socket_timeout": 2.0, "username": "watcher", "password": "other pw%41"}
    assert "sentinel_password" not in target.options


def test_tls_goes_to_the_sentinels_and_the_data_nodes() -> None:
    target = _read("rediss+sentinel://h1:26379/shop?ssl_ca_certs=/ca.pem&ssl_cert_reqs=required")
    assert target.tls
    assert target.options["ssl_ca_certs"] == "/ca.pem"
    sentinel = target.sentinel_settings({})
    assert sentinel["ssl"] is True and sentinel["ssl_ca_certs"] == "/ca.pem"
    assert sentinel["ssl_cert_reqs"] == "required"


def test_a_sentinel_url_is_kept_as_given() -> None:
    url = "redis+sentinel://h1:26379,h2:26379/shop"
    assert normalize_endpoint(url) == url
    assert is_sentinel_endpoint(url) and not is_sentinel_endpoint("redis://h:6379")


@pytest.mark.parametrize(
    ("url", "fault"),
    [
        ("redis+sentinel://h1:26379,h2:26379", "names no service"),
        ("redis+sentinel://h1:26379,h2:26379/", "names no service"),
        ("redis+sentinel://h1:26379,h2:port/shop", "invalid port in sentinel address 'h2:port'"),
        ("redis+sentinel://h1:26379,h2:99999/shop", "invalid port"),
        ("redis+sentinel://h1:26379,,h2:26379/shop", "empty sentinel address"),
        ("redis+sentinel://:26379/shop", "no host"),
        ("redis+sentinel://h1:26379/shop/zero", "names the database, a number"),
        ("redis+sentinel://h1:26379/shop?socket_timeout=soon", "socket_timeout"),
        ("redis+sentinel://h1:26379/shop?ssl_ca_certs=/ca.pem", "use rediss+sentinel://"),
        ("redis+cluster+sentinel://h1:26379/shop", "a Redis Cluster fails over by itself"),
        ("redis+sentinels://h1:26379/shop", "redis+sentinel://"),
    ],
)
def test_a_bad_sentinel_url_is_refused_without_its_passwords(url: str, fault: str) -> None:
    secret_url = url.replace("://", f"://app:{SECRET}@", 1)
    secret_url += ("&" if "?" in url else "?") + f"sentinel_password={SECRET}"
    for given in (url, secret_url):
        with pytest.raises(InvalidEndpointError, match="endpoint") as refused:
            normalize_endpoint(given)
        assert fault in str(refused.value)
        assert SECRET not in str(refused.value)
        with pytest.raises(InvalidEndpointError):
            FloClient(given)
        with pytest.raises(InvalidEndpointError):
            SyncFloClient(given)


def test_cluster_true_refuses_a_sentinel_url() -> None:
    with pytest.raises(InvalidEndpointError, match="no sentinels"):
        normalize_endpoint("redis+sentinel://h1:26379/shop", cluster=True)
    with pytest.raises(InvalidEndpointError, match="no sentinels"):
        FloClient("redis+sentinel://h1:26379/shop", cluster=True)


def test_the_passwords_are_redacted() -> None:
    url = f"redis+sentinel://app:{SECRET}@h1:26379,h2:26379/shop?sentinel_password={SECRET}"
    shown = redact(url)
    assert SECRET not in shown
    assert shown == "redis+sentinel://app:***@h1:26379,h2:26379/shop?sentinel_password=***"


def test_why_no_primary_was_named() -> None:
    down = ConnectionRefusedError("Connection refused")
    nobody = no_primary("shop", [("h1:26379", down), ("h2:26379", down)])
    assert "no Redis Sentinel answered (h1:26379, h2:26379: Connection refused)" in str(nobody)
    assert "hosts and ports" in str(nobody)
    elsewhere = no_primary("shop", [("h1:26379", down), ("h2:26379", {"orders": {}})])
    assert "monitor no service named 'shop' (they monitor: orders)" in str(elsewhere)
    known = no_primary("shop", [("h1:26379", {"shop": {}})])
    assert "know service 'shop' but name no primary that is up" in str(known)
