"""A loopback HTTP proxy in front of an S3 endpoint that injects scripted faults.

    with FaultyProxy(upstream_url) as proxy:
        proxy.script(Fault.error(503, "SlowDown"), Fault.truncate(1000, method="GET"))
        ... point an S3Config at proxy.url ...
        proxy.log   # [(method, path, range header, fault name or None), ...]

Each request consumes the first scripted fault if its method matches (or the fault has none);
otherwise the request is forwarded to the upstream server unchanged.
"""

from __future__ import annotations

import collections
import http.client
import threading
import urllib.parse
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "expect", "proxy-connection", "upgrade"}


@dataclass(frozen=True)
class Fault:
    name: str
    method: str | None = None
    status: int = 0
    message: str = ""
    truncate_after: int = -1

    @classmethod
    def error(cls, status: int, code: str, method: str | None = None) -> "Fault":
        """Answer with an S3 error document instead of forwarding."""
        return cls(name=code, method=method, status=status, message=f"injected {code}")

    @classmethod
    def truncate(cls, after_bytes: int, method: str | None = "GET") -> "Fault":
        """Forward, but cut the response body after ``after_bytes`` and drop the connection."""
        return cls(name="truncated", method=method, truncate_after=after_bytes)


class FaultyProxy:
    def __init__(self, upstream_url: str):
        parsed = urllib.parse.urlsplit(upstream_url)
        self.upstream = (parsed.hostname, parsed.port)
        self.log: list[tuple[str, str, str | None, str | None]] = []
        self._faults: collections.deque[Fault] = collections.deque()
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def script(self, *faults: Fault) -> None:
        with self._lock:
            self._faults.extend(faults)

    def __enter__(self) -> "FaultyProxy":
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)

    def _next_fault(self, method: str) -> Fault | None:
        with self._lock:
            if self._faults and self._faults[0].method in (None, method):
                return self._faults.popleft()
        return None

    def _handler_class(self):
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # answers "Expect: 100-continue" right away

            def log_message(self, format, *args):  # noqa: A002 - silence per-request logging
                pass

            def _handle(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                fault = proxy._next_fault(self.command)
                with proxy._lock:
                    proxy.log.append((self.command, self.path, self.headers.get("Range"), fault.name if fault else None))
                if fault is not None and fault.status:
                    self._send_error_document(fault)
                    return
                status, reason, headers, payload = self._forward(body)
                self.send_response(status, reason)
                for name, value in headers:
                    if name.lower() not in _HOP_BY_HOP and name.lower() != "content-length":
                        self.send_header(name, value)
                self.send_header("Content-Length", str(len(payload)))
                self.send_header("Connection", "close")
                self.end_headers()
                self.close_connection = True
                if self.command == "HEAD":
                    return
                if fault is not None and fault.truncate_after >= 0:
                    self.wfile.write(payload[: fault.truncate_after])
                    self.wfile.flush()
                    return  # the connection closes short of Content-Length
                self.wfile.write(payload)

            def _forward(self, body: bytes):
                connection = http.client.HTTPConnection(*proxy.upstream, timeout=30)
                try:
                    headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
                    connection.request(self.command, self.path, body=body, headers=headers)
                    response = connection.getresponse()
                    return response.status, response.reason, response.getheaders(), response.read()
                finally:
                    connection.close()

            def _send_error_document(self, fault: Fault):
                document = (
                    '<?xml version="1.0" encoding="UTF-8"?>\n'
                    f"<Error><Code>{fault.name}</Code><Message>{fault.message}</Message>"
                    "<RequestId>injected</RequestId></Error>"
                ).encode()
                self.send_response(fault.status)
                self.send_header("Content-Type", "application/xml")
                self.send_header("Content-Length", str(len(document)))
                self.send_header("Connection", "close")
                self.end_headers()
                self.close_connection = True
                if self.command != "HEAD":
                    self.wfile.write(document)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle

        return Handler
