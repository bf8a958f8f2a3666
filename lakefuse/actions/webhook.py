"""The webhook hook type: one HTTP POST of a JSON body, with a hard total deadline.

Owns the HTTP side of hooks: building the request URL (query parameters appended to the URL's
own, a list value repeats the parameter), the policy of the POST, the bounded read of the
answer, and the mapping of every network failure to a one-line ``WebhookResponse.error``
(``post_json`` never raises for network trouble).  The HTTP protocol itself (status line,
headers, ``Content-Length``, chunked and close-delimited bodies, HTTP/1.0 and HTTP/1.1 servers,
TLS) is urllib3's: one fresh connection pool per call, closed afterwards.

The policy: no retries; redirects are not followed (a 3xx is a non-2xx answer, hence a
failure); TLS certificates and host names are verified against certifi's CA bundle when
certifi is installed, else the system's default store; at most ``max_response_bytes`` of the
body are kept (one byte more is read to tell that it was cut, ``body_truncated``); content
codings are not decoded.  urllib3's connect and read timeouts bound each socket operation, so
the whole exchange (DNS, connect, TLS, send, headers, body) is bounded separately: it runs in
a worker thread and, when the deadline passes, the caller gets a timeout at once and the
worker's socket is shut down, which ends a server trickling bytes.  A DNS lookup or a TLS
handshake in progress cannot be cut: the caller still returns on time, and the worker ends
when the resolver, or the handshake's per-operation timeout, gives up.
"""

from __future__ import annotations

import http.client
import socket
import ssl
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable
from urllib.parse import urlencode

import urllib3
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.exceptions import NewConnectionError, ProtocolError
from urllib3.exceptions import SSLError as Urllib3SSLError
from urllib3.exceptions import TimeoutError as Urllib3TimeoutError
from urllib3.util import parse_url

from lakefuse.actions.duration import format_seconds

#: how much of a response body is kept (for the hook's log)
MAX_LOGGED_RESPONSE_BYTES = 64 * 1024
USER_AGENT = "lakefuse-actions/1"
_READ_CHUNK = 64 * 1024
_TIMED_OUT = "timed out"


@dataclass
class WebhookResponse:
    """What came back: a status (``None`` if no HTTP answer), or ``error`` saying why not."""

    url: str
    status: int | None = None
    reason: str = ""
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes = b""
    body_truncated: bool = False
    error: str | None = None
    elapsed_seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error is None and self.status is not None and 200 <= self.status < 300


def build_url(url: str, query_params: Iterable[tuple[str, Iterable[str]]]) -> str:
    """``url`` with the parameters appended to its query string (list values repeat)."""
    pairs = [(name, value) for name, values in query_params for value in values]
    if not pairs:
        return url
    extra = urlencode(pairs)
    base, hash_mark, fragment = url.partition("#")
    if "?" not in base:
        separator = "?"
    elif base.endswith(("?", "&")):
        separator = ""
    else:
        separator = "&"
    return base + separator + extra + hash_mark + fragment


def _ca_bundle() -> str | None:
    """certifi's CA file if certifi is installed; None: the system's default store."""
    try:
        import certifi
    except ImportError:
        return None
    return certifi.where()


# ------------------------------------------------------------------ connections we can cut


class _ReportsSocket:
    """Hands the connected socket to ``on_connect`` (the exchange), so that another thread can
    shut it down; the socket is kept even after http.client drops ``self.sock`` (a response
    that closes the connection), which is when the old hand-written client lost it."""

    def __init__(self, *args, on_connect: Callable[[socket.socket], None], **kwargs):
        super().__init__(*args, **kwargs)
        self._on_connect = on_connect

    def connect(self) -> None:
        super().connect()
        self._on_connect(self.sock)


class _HTTPConnection(_ReportsSocket, HTTPConnection):
    pass


class _HTTPSConnection(_ReportsSocket, HTTPSConnection):
    pass


class _HTTPPool(HTTPConnectionPool):
    ConnectionCls = _HTTPConnection


class _HTTPSPool(HTTPSConnectionPool):
    ConnectionCls = _HTTPSConnection


# ------------------------------------------------------------------ one exchange


class _Exchange:
    """One request in a worker thread; ``abort`` from another thread cuts its socket."""

    def __init__(self, url: str, body: bytes, headers: dict[str, str], deadline: float, max_body: int):
        self.url, self.body, self.headers = url, body, headers
        self.deadline, self.max_body = deadline, max_body
        self.response = WebhookResponse(url=url)
        self._lock = threading.Lock()
        self._socket: socket.socket | None = None
        self._aborted = False

    def _remaining(self) -> float:
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise socket.timeout("deadline passed")
        return remaining

    def _connected(self, sock: socket.socket) -> None:
        with self._lock:
            self._socket = sock
            aborted = self._aborted
        if aborted:
            _shut(sock)

    def abort(self) -> None:
        with self._lock:
            self._aborted = True
            sock = self._socket
        if sock is not None:
            _shut(sock)

    def run(self) -> None:
        try:
            self._run()
        except Exception as exc:  # anything is a failed hook, not a crashed commit
            self.response.error = _describe(exc)

    def _run(self) -> None:
        parts = parse_url(self.url)
        remaining = self._remaining()
        options = dict(timeout=urllib3.Timeout(connect=remaining, read=remaining), maxsize=1, block=False,
                       retries=False, on_connect=self._connected)
        if parts.scheme == "https":
            pool: HTTPConnectionPool = _HTTPSPool(parts.host, parts.port, cert_reqs="CERT_REQUIRED",
                                                  ca_certs=_ca_bundle(), **options)
        elif parts.scheme == "http":
            pool = _HTTPPool(parts.host, parts.port, **options)
        else:
            raise ValueError(f"unsupported URL scheme {parts.scheme!r}")
        try:
            answer = pool.request("POST", parts.request_uri, body=self.body, headers=self.headers,
                                  retries=False, redirect=False, assert_same_host=False,
                                  preload_content=False, decode_content=False, release_conn=False)
            try:
                self.response.status, self.response.reason = answer.status, answer.reason or ""
                self.response.headers = list(answer.headers.iteritems())
                chunks, size = [], 0
                while size <= self.max_body:
                    self._remaining()
                    chunk = answer.read(min(_READ_CHUNK, self.max_body + 1 - size), decode_content=False)
                    if not chunk:
                        break
                    chunks.append(chunk)
                    size += len(chunk)
                body = b"".join(chunks)
                self.response.body = body[: self.max_body]
                self.response.body_truncated = len(body) > self.max_body
            finally:
                answer.close()
        finally:
            pool.close()


def _shut(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # already closed


def _causes(exc: BaseException) -> Iterable[BaseException]:
    """``exc``, then what it wraps (urllib3 keeps the original in ``args`` or ``__cause__``)."""
    seen: set[int] = set()
    pending = [exc]
    while pending:
        current = pending.pop(0)
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        pending.extend(arg for arg in current.args if isinstance(arg, BaseException))
        if current.__cause__ is not None:
            pending.append(current.__cause__)


def _describe(exc: BaseException) -> str:
    """The one-line ``error`` of a failed exchange (``_TIMED_OUT`` for any timeout)."""
    chain = list(_causes(exc))
    if isinstance(exc, NewConnectionError):  # before timeouts: it subclasses ConnectTimeoutError
        cause = next((c for c in chain[1:] if isinstance(c, OSError)), None)
        if isinstance(cause, (socket.timeout, TimeoutError)):
            return _TIMED_OUT
        return f"connection failed: {_os_reason(cause or exc)}"
    if any(isinstance(c, (Urllib3TimeoutError, socket.timeout, TimeoutError)) for c in chain):
        return _TIMED_OUT
    tls = next((c for c in chain if isinstance(c, ssl.SSLError)), None)
    if tls is not None:
        detail = getattr(tls, "verify_message", None)
        return f"TLS error: {tls.reason or tls}" + (f" ({detail})" if detail and tls.reason else "")
    if isinstance(exc, Urllib3SSLError):
        return f"TLS error: {exc}"
    http_error = next((c for c in chain if isinstance(c, http.client.HTTPException)), None)
    if http_error is not None:
        return f"invalid HTTP response: {type(http_error).__name__} {http_error}".strip()
    os_error = next((c for c in chain if isinstance(c, OSError)), None)
    if os_error is not None:
        return f"connection failed: {_os_reason(os_error)}"
    if isinstance(exc, ProtocolError):
        return f"invalid HTTP response: {exc}"
    return f"request failed: {type(exc).__name__}: {exc}"


def _os_reason(exc: BaseException) -> str:
    return (exc.strerror if isinstance(exc, OSError) else None) or str(exc)


def post_json(url: str, body: bytes, timeout_seconds: float, *,
              max_response_bytes: int = MAX_LOGGED_RESPONSE_BYTES) -> WebhookResponse:
    """POST ``body`` (JSON) to ``url``; never raises for network trouble: the returned
    response has ``error`` set instead.  Returns within ``timeout_seconds`` (plus scheduling)."""
    started = time.monotonic()
    headers = {"Content-Type": "application/json", "User-Agent": USER_AGENT, "Connection": "close"}
    exchange = _Exchange(url, body, headers, started + timeout_seconds, max_response_bytes)
    worker = threading.Thread(target=exchange.run, name="lakefuse-webhook", daemon=True)
    worker.start()
    worker.join(timeout_seconds)
    if worker.is_alive():
        exchange.abort()  # the cut socket ends the worker promptly
        response = WebhookResponse(url=url, error=f"timed out after {format_seconds(timeout_seconds)}")
    else:
        response = exchange.response
        if response.error == _TIMED_OUT:
            response.error = f"timed out after {format_seconds(timeout_seconds)}"
    response.elapsed_seconds = time.monotonic() - started
    return response
