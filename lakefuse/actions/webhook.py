"""The webhook hook type: one HTTP POST of a JSON body, with a hard total deadline.

Owns the HTTP side of hooks (``http.client`` only, no extra dependency): building the request
URL (query parameters appended to the URL's own, a list value repeats the parameter), sending
the POST, reading a bounded part of the response, and enforcing the timeout on the whole
exchange (DNS, connect, send, headers, body), not per socket operation: the request runs in a
worker thread and, when the deadline passes, its socket is shut down and the caller gets a
timeout at once.  Redirects are not followed (a 3xx is a non-2xx answer, hence a failure).
"""

from __future__ import annotations

import http.client
import socket
import ssl
import threading
import time
from dataclasses import dataclass, field
from typing import Iterable
from urllib.parse import urlencode, urlsplit

from lakefuse.actions.duration import format_seconds

#: how much of a response body is kept (for the hook's log)
MAX_LOGGED_RESPONSE_BYTES = 64 * 1024
USER_AGENT = "lakefuse-actions/1"


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


class _Exchange:
    """One request in a worker thread; ``abort`` from another thread cuts its socket."""

    def __init__(self, url: str, body: bytes, headers: dict[str, str], deadline: float, max_body: int):
        self.url, self.body, self.headers = url, body, headers
        self.deadline, self.max_body = deadline, max_body
        self.response = WebhookResponse(url=url)
        self._lock = threading.Lock()
        self._connection: http.client.HTTPConnection | None = None
        self._aborted = False

    def _remaining(self) -> float:
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise socket.timeout("deadline passed")
        return remaining

    def abort(self) -> None:
        with self._lock:
            self._aborted = True
            connection = self._connection
        if connection is not None and connection.sock is not None:
            try:
                connection.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def run(self) -> None:
        try:
            self._run()
        except (socket.timeout, TimeoutError):
            self.response.error = "timed out"
        except ssl.SSLError as exc:
            self.response.error = f"TLS error: {exc.reason or exc}"
        except http.client.HTTPException as exc:
            self.response.error = f"invalid HTTP response: {type(exc).__name__} {exc}".strip()
        except OSError as exc:
            self.response.error = f"connection failed: {exc.strerror or exc}"
        except Exception as exc:  # anything else is a failed hook, not a crashed commit
            self.response.error = f"request failed: {type(exc).__name__}: {exc}"

    def _run(self) -> None:
        parts = urlsplit(self.url)
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        if parts.scheme == "https":
            connection: http.client.HTTPConnection = http.client.HTTPSConnection(
                parts.hostname, parts.port, timeout=self._remaining(), context=ssl.create_default_context())
        else:
            connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=self._remaining())
        with self._lock:
            if self._aborted:
                return
            self._connection = connection
        try:
            connection.connect()
            if self._aborted:
                return
            connection.sock.settimeout(self._remaining())
            connection.request("POST", target, body=self.body, headers=self.headers)
            connection.sock.settimeout(self._remaining())
            answer = connection.getresponse()
            self.response.status, self.response.reason = answer.status, answer.reason or ""
            self.response.headers = list(answer.getheaders())
            chunks, size = [], 0
            while size <= self.max_body:
                connection.sock.settimeout(self._remaining())
                chunk = answer.read(min(64 * 1024, self.max_body + 1 - size))
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
            body = b"".join(chunks)
            self.response.body = body[: self.max_body]
            self.response.body_truncated = len(body) > self.max_body
        finally:
            connection.close()


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
        exchange.abort()  # the cut socket ends the worker promptly (a DNS lookup cannot be cut)
        response = WebhookResponse(url=url, error=f"timed out after {format_seconds(timeout_seconds)}")
    else:
        response = exchange.response
        if response.error == "timed out":
            response.error = f"timed out after {format_seconds(timeout_seconds)}"
    response.elapsed_seconds = time.monotonic() - started
    return response
