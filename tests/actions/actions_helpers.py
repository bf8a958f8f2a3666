"""Helpers of the actions tests: a real HTTP server on loopback that records the webhook calls
it gets, and builders of action files and hook events."""

from __future__ import annotations

import json
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from lakefuse.actions import HookEvent

SLOW_ENDPOINT_MAX_SECONDS = 5.0
FORBIDDEN_BODY = "no temporary files allowed: tmp/a.txt"


@dataclass
class RecordedRequest:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes

    def json(self) -> dict:
        return json.loads(self.body)


@dataclass
class HookServer:
    """Paths: ``/ok`` 200, ``/forbidden`` 403 with a short body, ``/error`` 500 with a 4 KiB
    body, ``/slow`` answers after ``SLOW_ENDPOINT_MAX_SECONDS`` (or at teardown), ``/trickle``
    sends its body a byte every 50 ms, ``/redirect`` 302, ``/switch`` answers ``switch_status`` (a
    test changes it between calls; a 403 has the short body).  Any other path answers 200."""

    port: int = 0
    requests: list[RecordedRequest] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    release: threading.Event = field(default_factory=threading.Event)
    switch_status: int = 403

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def paths(self) -> list[str]:
        with self.lock:
            return [r.path for r in self.requests]

    def wait_for_requests(self, count: int, timeout: float = 5.0) -> list[RecordedRequest]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                if len(self.requests) >= count:
                    return list(self.requests)
            time.sleep(0.01)
        raise AssertionError(f"expected {count} requests, got {len(self.requests)}")


def _handler_for(server: HookServer):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):  # quiet
            pass

        def _answer(self, status: int, body: bytes, headers: dict | None = None) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            try:
                self.wfile.write(body)
            except OSError:
                pass  # the client gave up (timeout tests)

        def do_POST(self):
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length)
            parts = urlsplit(self.path)
            with server.lock:
                server.requests.append(RecordedRequest(
                    "POST", parts.path, parse_qs(parts.query, keep_blank_values=True),
                    {k.lower(): v for k, v in self.headers.items()}, body))
            if parts.path == "/forbidden":
                self._answer(403, FORBIDDEN_BODY.encode())
            elif parts.path == "/error":
                self._answer(500, b"boom\n" + b"x" * 4096)
            elif parts.path == "/slow":
                server.release.wait(SLOW_ENDPOINT_MAX_SECONDS)
                self._answer(200, b"late")
            elif parts.path == "/trickle":  # a byte every 50 ms: no single read ever waits long
                self.send_response(200)
                self.send_header("Content-Length", "1000")
                self.end_headers()
                for _ in range(int(SLOW_ENDPOINT_MAX_SECONDS / 0.05)):
                    if server.release.wait(0.05):
                        break
                    try:
                        self.wfile.write(b"x")
                        self.wfile.flush()
                    except OSError:
                        break
            elif parts.path == "/switch":
                status = server.switch_status
                self._answer(status, FORBIDDEN_BODY.encode() if status == 403 else b"ok")
            elif parts.path == "/redirect":
                self._answer(302, b"", {"Location": "/ok"})
            else:
                self._answer(200, b"ok")

        do_GET = do_POST

    return Handler


def action_yaml(name: str, hooks: list[tuple[str, str]], on: str = "  pre-commit:\n", extra_props: str = "") -> bytes:
    """A small action file: ``hooks`` as (id, url); ``on`` is the indented body of ``on:``."""
    lines = [f"name: {name}", "on:", on.rstrip("\n"), "hooks:"]
    for hook_id, url in hooks:
        lines += [f"  - id: {hook_id}", "    type: webhook", "    properties:", f"      url: \"{url}\""]
        if extra_props:
            lines += ["      " + line for line in extra_props.strip("\n").splitlines()]
    return ("\n".join(lines) + "\n").encode()


def make_event(files: list[tuple[str, bytes]], *, event_type: str = "pre-commit", repository_id: str = "repo1",
               branch_id: str = "main", source_ref: str | None = None, commit_id: str | None = None,
               **fields) -> HookEvent:
    return HookEvent(
        event_type=event_type, repository_id=repository_id, branch_id=branch_id,
        source_ref=source_ref or branch_id, commit_message=fields.pop("commit_message", "add data"),
        committer=fields.pop("committer", "alice"),
        commit_metadata=fields.pop("commit_metadata", {"key": "value"}), commit_id=commit_id,
        read_action_files=lambda: list(files), **fields)


@contextmanager
def running_hook_server():
    state = HookServer()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(state))
    httpd.daemon_threads = True
    state.port = httpd.server_address[1]
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        state.release.set()
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)
