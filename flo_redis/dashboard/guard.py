"""Who may change anything through the dashboard: write access, sessions and CSRF.

A dashboard is read-only unless it was started with a token. With one, an operator logs
in by typing the token once; the browser then holds a session cookie (HttpOnly,
SameSite=Strict) and every form carries a CSRF token derived from that session. Both are
HMACs under a secret drawn when the dashboard starts, so nothing is stored and a restart
logs everybody out. A change is made only for a POST whose session and CSRF token are
valid and whose ``Origin`` (when the browser sends one) is the dashboard itself.

Behind a reverse proxy the browser's address is not the one the dashboard listens on:
the proxy forwards the browser's ``Host`` (which a loopback dashboard would refuse) or
puts its own (which no ``Origin`` then matches). The dashboard's public origins
(``origins``, ``--origin https://dash.example.com``) are accepted as both: as a name a
request may be addressed to, and as the ``Origin`` of a change.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

from aiohttp import web

SESSION_COOKIE = "flo_dashboard_session"


class Refused(Exception):
    """A change the guard does not allow; ``why`` is shown to the operator."""

    def __init__(self, why: str, *, login: bool = False) -> None:
        super().__init__(why)
        self.why = why
        self.login = login


@dataclass(frozen=True)
class Access:
    """What one request may do, for the page to show: ``writable`` (the dashboard
    accepts changes at all), ``session`` (this browser logged in) and the ``csrf``
    value its forms must carry."""

    writable: bool
    session: bool
    csrf: str


class Guard:
    """Holds the write token (None: read-only) and the secret of this run."""

    def __init__(
        self, token: str | None, *, loopback_only: bool = False, origins: Iterable[str] = ()
    ) -> None:
        if token is not None and len(token) < 16:
            raise ValueError("the write token must be at least 16 characters")
        self._token = token
        self._secret = secrets.token_bytes(32)
        # Listening on a loopback address: only requests addressed to a loopback name
        # (or to a public origin's) are answered, so a page whose name was made to
        # resolve to 127.0.0.1 (DNS rebinding) cannot read the dashboard through the
        # visitor's browser.
        self.loopback_only = loopback_only
        if isinstance(origins, str):
            raise ValueError(
                f"origins is a list of origins, like ['https://dash.example.com'], not one "
                f"str ({origins!r})"
            )
        self.origins = frozenset(public_origin(o) for o in origins)
        self._hosts = frozenset(urlsplit(o).netloc for o in self.origins)
        # Reached only over TLS (every public origin https): the session cookie is sent
        # over TLS only. Browsers take a Secure cookie from http://localhost too.
        self._secure = bool(self.origins) and all(o.startswith("https:") for o in self.origins)

    def check_host(self, request: web.Request) -> None:
        """Raise :class:`Refused` for a request addressed to a name this dashboard does
        not serve (see ``loopback_only``)."""
        if not self.loopback_only or is_loopback(urlsplit(f"//{request.host}").hostname):
            return
        if self._public_host(request.host):
            return
        raise Refused(
            "this dashboard listens on a loopback address and answers only requests "
            "addressed to it (localhost, 127.0.0.1 or [::1]); to serve another name, "
            "start it with --host, or behind a proxy name its public address with --origin"
        )

    @property
    def writable(self) -> bool:
        return self._token is not None

    def _mac(self, purpose: str, nonce: str) -> str:
        msg = f"{purpose}:{nonce}".encode()
        return hmac.new(self._secret, msg, hashlib.sha256).hexdigest()

    def _nonce(self, request: web.Request) -> str | None:
        """The nonce of this browser's valid session cookie, else None."""
        if not self.writable:
            return None
        nonce, _, mac = request.cookies.get(SESSION_COOKIE, "").partition(".")
        if nonce and hmac.compare_digest(mac, self._mac("session", nonce)):
            return nonce
        return None

    def access(self, request: web.Request) -> Access:
        nonce = self._nonce(request)
        csrf = self._mac("csrf", nonce) if nonce else ""
        return Access(self.writable, nonce is not None, csrf)

    def log_in(self, token: str, response: web.StreamResponse) -> None:
        """Start a session on ``response`` if ``token`` is the write token."""
        if self._token is None:
            raise Refused("this dashboard is read-only: start it with --write to make changes")
        if not hmac.compare_digest(token.encode(), self._token.encode()):
            raise Refused("that is not this dashboard's token", login=True)
        nonce = secrets.token_hex(16)
        response.set_cookie(
            SESSION_COOKIE,
            f"{nonce}.{self._mac('session', nonce)}",
            httponly=True,
            samesite="Strict",
            path="/",
            secure=self._secure,
        )

    @staticmethod
    def log_out(response: web.StreamResponse) -> None:
        response.del_cookie(SESSION_COOKIE, path="/")

    def check_change(self, request: web.Request, csrf: str) -> None:
        """Raise :class:`Refused` unless this POST may change something."""
        if not self.writable:
            raise Refused("this dashboard is read-only: start it with --write to make changes")
        origin = request.headers.get("Origin")
        if origin is not None and not self._own_origin(origin, request.host):
            raise Refused(
                "the form was sent from another site (behind a proxy, name the dashboard's "
                "public address with --origin)"
            )
        nonce = self._nonce(request)
        if nonce is None:
            raise Refused("changes need the dashboard's token: log in first", login=True)
        if not hmac.compare_digest(csrf.encode(), self._mac("csrf", nonce).encode()):
            raise Refused("the form is stale or forged (CSRF check failed): reload the page")

    def _public_host(self, host: str) -> bool:
        """Whether ``host`` (a request's ``Host``) names one of the public origins."""
        return any(_netloc(scheme, host) in self._hosts for scheme in _DEFAULT_PORTS)

    def _own_origin(self, origin: str, host: str) -> bool:
        """Whether a browser's ``Origin`` is this dashboard: one of its public origins,
        or the address the request was sent to when that is not a public name (whose
        origin counts with its own scheme only: ``http://`` for an ``https://`` one is
        another site)."""
        try:
            if public_origin(origin) in self.origins:
                return True
        except ValueError:
            return False  # "null", or not an origin at all
        return urlsplit(origin).netloc == host and not self._public_host(host)


_DEFAULT_PORTS = {"http": 80, "https": 443}


def _netloc(scheme: str, netloc: str) -> str:
    """``netloc`` lowercased, without the scheme's default port (as browsers send it)."""
    netloc = netloc.lower()
    host, colon, port = netloc.rpartition(":")
    return host if colon and port == str(_DEFAULT_PORTS[scheme]) else netloc


def public_origin(origin: str) -> str:
    """``origin`` (``http(s)://host[:port]``, nothing after it) as a browser sends it in
    ``Origin``: scheme and host lowercased, a default port left out. ValueError names
    what is wrong with a value that is not one."""
    if not isinstance(origin, str):
        raise ValueError(f"an origin is a str like https://dash.example.com, got {origin!r}")
    try:
        parts = urlsplit(origin.strip())
    except ValueError:  # an unclosed IPv6 bracket
        parts = urlsplit("")
    if (
        parts.scheme.lower() not in _DEFAULT_PORTS
        or not parts.hostname
        or parts.path not in ("", "/")
        or parts.query
        or parts.fragment
        or parts.username is not None
    ):
        raise ValueError(
            f"an origin is http:// or https:// and a host, with a port if not the "
            f"default, and nothing after it (like https://dash.example.com), got {origin!r}"
        )
    try:
        parts.port  # noqa: B018 - raises for a port that is not a number
    except ValueError:
        raise ValueError(f"the port of origin {origin!r} is not a number from 0 to 65535") from None
    scheme = parts.scheme.lower()
    return f"{scheme}://{_netloc(scheme, parts.netloc)}"


def is_loopback(host: str | None) -> bool:
    """Whether ``host`` (a name or an address, without brackets) is this machine's own."""
    if not host:
        return False
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def local_path(target: str, default: str = "/") -> str:
    """``target`` if it is a path on this site (for redirects after a form), else
    ``default``: never another host, scheme or a protocol-relative ``//`` URL."""
    parts = urlsplit(target)
    if parts.scheme or parts.netloc or not target.startswith("/") or target.startswith("//"):
        return default
    if "\\" in target:
        return default
    return target
