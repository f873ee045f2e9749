"""Who may change anything through the dashboard: write access, sessions, CSRF, log-in
throttling.

A dashboard is read-only unless it was started with a token. With one, an operator logs
in by typing the token once; the browser then holds a session cookie (HttpOnly,
SameSite=Strict) naming a random session id, and every form carries a CSRF value
derived from it. A change is made only for a POST whose session is open and whose CSRF
value and ``Origin`` (when the browser sends one) are the dashboard's own.

Sessions live in Redis (:func:`flo_redis._wire.keys.dashboard_keys`), so every process of a
dashboard (several behind a load balancer, or one restarted) knows them, and a log-out
ends one for all. They are per namespace, each in its namespace's keys and its own
cookie (:meth:`Guard.cookie_name`): a log-in allows changes in that namespace only.
Redis holds only an HMAC of the session id under the token: a user who can read the
namespace cannot log in with what it finds there, and a dashboard started with another
token knows none of the old sessions. A session ends after
``idle_s`` without a request and ``max_s`` after its log-in, used or not
(:class:`SessionPolicy`). Failed log-ins are counted per client address and for the
dashboard as a whole; past either limit within the window, log-ins are refused (429)
until the oldest counted failure is older than the window, whatever the token.

Behind a reverse proxy the browser's address is not the one the dashboard listens on:
the proxy forwards the browser's ``Host`` (which a loopback dashboard would refuse) or
puts its own (which no ``Origin`` then matches). The dashboard's public origins
(``origins``, ``--origin https://dash.example.com``) are accepted as both: as a name a
request may be addressed to, and as the ``Origin`` of a change. There every request
comes from the proxy's address, so the per-address limit counts all browsers together.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import math
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

from aiohttp import web

from flo_redis._wire.checks import check_count
from flo_redis._wire.gateway import (
    DASHBOARD_LOGIN,
    DASHBOARD_SESSION_CLOSE,
    DASHBOARD_SESSION_TOUCH,
)
from flo_redis._wire.keys import DashboardKeys, dashboard_keys
from flo_redis._wire.status import Status
from flo_redis.client import FloClient
from flo_redis.errors import ValidationError

SESSION_COOKIE = "flo_dashboard_session"
_MAX_SECONDS = 365 * 86400
_MAX_LIMIT = 10_000


class Refused(Exception):
    """A change the guard does not allow; ``why`` is shown to the operator."""

    def __init__(self, why: str, *, login: bool = False) -> None:
        super().__init__(why)
        self.why = why
        self.login = login


class Throttled(Refused):
    """A log-in refused for too many failed ones; try again in ``retry_after_s``."""

    def __init__(self, why: str, retry_after_s: int) -> None:
        super().__init__(why)
        self.retry_after_s = retry_after_s


@dataclass(frozen=True)
class SessionPolicy:
    """How long a session lasts and how failed log-ins are throttled.

    A session ends ``idle_s`` after its last request, and ``max_s`` after its log-in
    whatever its use. Within ``window_s``, one client address may fail to log in
    ``failures_per_address`` times and all addresses together ``failures_total``
    times; past either, log-ins are refused until the oldest failure counted is older
    than the window. ValueError for a setting out of its range."""

    idle_s: float = 1800.0  # 30 minutes
    max_s: float = 8 * 3600.0  # 8 hours
    window_s: float = 900.0  # 15 minutes
    failures_per_address: int = 10
    failures_total: int = 100

    def __post_init__(self) -> None:
        for name in ("idle_s", "max_s", "window_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError(f"{name} is a number of seconds, got {value!r}")
            if not (math.isfinite(value) and 1 <= value <= _MAX_SECONDS):
                raise ValueError(f"{name} is 1 to {_MAX_SECONDS} seconds, got {value!r}")
        for name in ("failures_per_address", "failures_total"):
            try:
                check_count(name, getattr(self, name), 1, _MAX_LIMIT)
            except ValidationError as exc:
                raise ValueError(str(exc)) from None

    def args(self) -> list[str]:
        return [str(round(self.idle_s * 1000)), str(round(self.max_s * 1000))]


@dataclass(frozen=True)
class Access:
    """What one request may do, for the page to show: ``writable`` (the dashboard
    accepts changes at all), ``session`` (this browser logged in) and the ``csrf``
    value its forms must carry."""

    writable: bool
    session: bool
    csrf: str


def client_address(request: web.Request) -> str:
    """The client's address as the failures of one client are counted: an IPv4 address,
    or the /64 network of an IPv6 one (one host commonly holds a whole /64)."""
    try:
        address = ipaddress.ip_address(request.remote or "")
    except ValueError:
        return "unknown"
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.IPv6Network((address, 64), strict=False))
    return str(address)


class Guard:
    """Holds the write token (None: read-only) and the session policy."""

    def __init__(
        self,
        token: str | None,
        *,
        loopback_only: bool = False,
        origins: Iterable[str] = (),
        policy: SessionPolicy | None = None,
    ) -> None:
        if token is not None and len(token) < 16:
            raise ValueError("the write token must be at least 16 characters")
        self._token = token
        # Every MAC is keyed by the token: another token knows none of these sessions.
        self._secret = hashlib.sha256(b"flo-redis dashboard\0" + (token or "").encode()).digest()
        self.policy = policy if policy is not None else SessionPolicy()
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
        # The namespace whose sessions ride in SESSION_COOKIE; another namespace's in a
        # cookie of its own (cookie_name), so a log-in to one keeps the other's.
        self.home: str | None = None

    def cookie_name(self, namespace: str) -> str:
        """The session cookie of ``namespace``: SESSION_COOKIE for the dashboard's own,
        a name of its own (a digest of it) for every other one."""
        if self.home is None or namespace == self.home:
            return SESSION_COOKIE
        return f"{SESSION_COOKIE}_{hashlib.sha256(namespace.encode()).hexdigest()[:16]}"

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

    def _mac(self, purpose: str, session_id: str) -> str:
        msg = f"{purpose}:{session_id}".encode()
        return hmac.new(self._secret, msg, hashlib.sha256).hexdigest()

    def _keys(self, client: FloClient, session_id: str, address: str = "-") -> DashboardKeys:
        return dashboard_keys(client.namespace, address, self._mac("session", session_id))

    async def _session(self, request: web.Request, client: FloClient) -> str | None:
        """This browser's session id if its session is open (kept for another idle
        period), else None."""
        session_id = request.cookies.get(self.cookie_name(client.namespace), "")
        if not self.writable or not (20 <= len(session_id) <= 64 and session_id.isascii()):
            return None
        reply = await DASHBOARD_SESSION_TOUCH(
            client.session, self._keys(client, session_id), self.policy.args()
        )
        return session_id if reply.status == Status.OK else None

    async def access(self, request: web.Request, client: FloClient) -> Access:
        session_id = await self._session(request, client)
        csrf = self._mac("csrf", session_id) if session_id else ""
        return Access(self.writable, session_id is not None, csrf)

    async def log_in(
        self, request: web.Request, client: FloClient, token: str, response: web.StreamResponse
    ) -> None:
        """Open a session on ``response`` if ``token`` is the write token. Refused for a
        wrong one; :class:`Throttled` past the failed log-ins' limits (then even the
        right token is refused)."""
        if self._token is None:
            raise Refused("this dashboard is read-only: start it with --write to make changes")
        given = token.encode(errors="replace")  # a lone surrogate is no token's either
        right = hmac.compare_digest(given, self._token.encode())
        session_id = secrets.token_urlsafe(32)
        policy = self.policy
        reply = await DASHBOARD_LOGIN(
            client.session,
            self._keys(client, session_id, client_address(request)),
            [
                "1" if right else "0",
                secrets.token_hex(8),
                str(round(policy.window_s * 1000)),
                str(policy.failures_per_address),
                str(policy.failures_total),
                *policy.args(),
            ],
        )
        if reply.status == Status.OUT_OF_RANGE:
            wait_s = max(1, math.ceil(reply.value / 1000))
            raise Throttled(
                f"too many failed log-ins; try again in {wait_s} s", retry_after_s=wait_s
            )
        if reply.status != Status.OK:
            raise Refused("that is not this dashboard's token", login=True)
        response.set_cookie(
            self.cookie_name(client.namespace),
            session_id,
            httponly=True,
            samesite="Strict",
            path="/",
            secure=self._secure,
        )

    async def log_out(
        self, request: web.Request, client: FloClient, response: web.StreamResponse
    ) -> None:
        """End this browser's session, for every process of the dashboard."""
        session_id = await self._session(request, client)
        if session_id is not None:
            await DASHBOARD_SESSION_CLOSE(client.session, self._keys(client, session_id))
        response.del_cookie(self.cookie_name(client.namespace), path="/")

    async def check_change(self, request: web.Request, client: FloClient, csrf: str) -> None:
        """Raise :class:`Refused` unless this POST may change something."""
        if not self.writable:
            raise Refused("this dashboard is read-only: start it with --write to make changes")
        origin = request.headers.get("Origin")
        if origin is not None and not self._own_origin(origin, request.host):
            raise Refused(
                "the form was sent from another site (behind a proxy, name the dashboard's "
                "public address with --origin)"
            )
        session_id = await self._session(request, client)
        if session_id is None:
            raise Refused("changes need the dashboard's token: log in first", login=True)
        if not hmac.compare_digest(csrf.encode(), self._mac("csrf", session_id).encode()):
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
