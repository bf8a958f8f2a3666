"""Webhooks against ordinary servers (issue 15): real HTTP servers on loopback, each answering
in one of the ways servers do (HTTP/1.0, keep-alive, chunked, close-delimited, slow, trickling,
redirecting, failing, oversized, TLS), checked through ``post_json`` and through whole hook runs
of the actions runner."""

from __future__ import annotations

import datetime
import ipaddress
import json
import socketserver
import ssl
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable

import pytest
from actions_helpers import action_yaml, make_event

from lakefuse.actions import ActionsRunner, RunStore
from lakefuse.actions import webhook
from lakefuse.actions.runner import failure_reason
from lakefuse.actions.webhook import post_json
from lakefuse.errors import HookFailed

BODY = json.dumps({"event_type": "pre-commit", "hook_id": "check"}).encode()
HANDLER_WAIT_MAX = 5.0  # a slow handler never outlives this (teardown releases it sooner)


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Server:
    """A running loopback server: what it received, and events its handlers use."""

    port: int = 0
    scheme: str = "http"
    requests: list[Seen] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    release: threading.Event = field(default_factory=threading.Event)  # set at teardown
    client_gone: threading.Event = field(default_factory=threading.Event)  # a write failed

    def url(self, path: str = "/hook") -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}{path}"

    def paths(self) -> list[str]:
        with self.lock:
            return [seen.path for seen in self.requests]


Respond = Callable[[BaseHTTPRequestHandler, Server], None]


def _handler(server: Server, respond: Respond, protocol_version: str):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):  # quiet
            pass

        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            with server.lock:
                server.requests.append(Seen(self.command, self.path,
                                            {k.lower(): v for k, v in self.headers.items()}, body))
            respond(self, server)

        do_GET = do_POST

    Handler.protocol_version = protocol_version  # the class default is "HTTP/1.0"
    return Handler


@pytest.fixture
def serve():
    """``serve(respond, protocol_version=..., tls=None)`` starts a threaded server on an
    ephemeral loopback port whose handler records each request then calls ``respond``."""
    running: list[tuple[Server, socketserver.BaseServer, threading.Thread]] = []

    def start(respond: Respond, protocol_version: str = BaseHTTPRequestHandler.protocol_version,
              tls: ssl.SSLContext | None = None, server_class=None, handler=None) -> Server:
        state = Server(scheme="https" if tls else "http")
        httpd = (server_class or ThreadingHTTPServer)(
            ("127.0.0.1", 0), handler or _handler(state, respond, protocol_version))
        httpd.daemon_threads = True
        if tls is not None:
            httpd.socket = tls.wrap_socket(httpd.socket, server_side=True)
        state.port = httpd.server_address[1]
        thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        thread.start()
        running.append((state, httpd, thread))
        return state

    yield start
    for state, httpd, thread in running:
        state.release.set()
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


# ------------------------------------------------------------------ ways of answering


def _write(handler: BaseHTTPRequestHandler, server: Server, data: bytes) -> bool:
    try:
        handler.wfile.write(data)
        handler.wfile.flush()
        return True
    except OSError:
        server.client_gone.set()
        return False


def answer(status: int, body: bytes, *, length: bool = True, headers: dict[str, str] | None = None,
           keep_open: bool = False) -> Respond:
    """A plain answer; ``length=False`` leaves the body delimited by the close;
    ``keep_open`` keeps the connection even though the client asked to close it."""

    def respond(handler: BaseHTTPRequestHandler, server: Server) -> None:
        handler.send_response(status)
        handler.send_header("Content-Type", "text/plain")
        if length:
            handler.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            handler.send_header(name, value)
        handler.end_headers()
        _write(handler, server, body)
        if keep_open:
            handler.close_connection = False

    return respond


def chunked(*pieces: bytes) -> Respond:
    def respond(handler: BaseHTTPRequestHandler, server: Server) -> None:
        handler.send_response(200)
        handler.send_header("Transfer-Encoding", "chunked")
        handler.end_headers()
        for piece in pieces:
            if not _write(handler, server, b"%x\r\n%s\r\n" % (len(piece), piece)):
                return
            time.sleep(0.01)  # separate packets
        _write(handler, server, b"0\r\n\r\n")
        handler.close_connection = False  # framing, not the close, ends the body

    return respond


def close_delimited(*pieces: bytes) -> Respond:
    def respond(handler: BaseHTTPRequestHandler, server: Server) -> None:
        handler.send_response(200)
        handler.send_header("Connection", "close")
        handler.end_headers()
        for piece in pieces:
            if not _write(handler, server, piece):
                return
            time.sleep(0.01)
        handler.close_connection = True

    return respond


def sleeps_then(status: int) -> Respond:
    def respond(handler: BaseHTTPRequestHandler, server: Server) -> None:
        server.release.wait(HANDLER_WAIT_MAX)
        answer(status, b"late")(handler, server)

    return respond


def trickles(interval: float = 0.2) -> Respond:
    """Headers at once, then a byte every ``interval``: no single read waits long."""

    def respond(handler: BaseHTTPRequestHandler, server: Server) -> None:
        handler.send_response(200)
        handler.send_header("Content-Length", "100")
        handler.end_headers()
        if not _write(handler, server, b""):
            return
        for _ in range(int(HANDLER_WAIT_MAX / interval)):
            if server.release.wait(interval) or not _write(handler, server, b"x"):
                return

    return respond


# ------------------------------------------------------------------ framing


def test_http10_server_as_python_serves_by_default(serve):
    """BaseHTTPRequestHandler's defaults: HTTP/1.0, no Content-Length, close after the body.
    The hand-written client of before lost its socket here (AttributeError on settimeout)."""
    server = serve(answer(200, b"accepted", length=False))
    response = post_json(server.url("/hook?x=1"), BODY, 2)
    assert response.error is None and response.ok
    assert (response.status, response.reason, response.body) == (200, "OK", b"accepted")
    assert not response.body_truncated
    assert dict((k.lower(), v) for k, v in response.headers)["content-type"] == "text/plain"
    (seen,) = server.requests
    assert (seen.method, seen.path) == ("POST", "/hook?x=1")
    assert seen.headers["content-type"] == "application/json"
    assert seen.headers["content-length"] == str(len(BODY))
    assert json.loads(seen.body) == json.loads(BODY)


def test_http10_server_with_content_length(serve):
    server = serve(answer(200, b"fine"))
    response = post_json(server.url(), BODY, 2)
    assert response.ok and response.body == b"fine"


def test_http11_keep_alive_ends_at_content_length(serve):
    """The server keeps the connection open: the client must stop at Content-Length, not
    wait for a close that never comes."""
    server = serve(answer(200, b"kept", headers={"Connection": "keep-alive"}, keep_open=True),
                   protocol_version="HTTP/1.1")
    started = time.monotonic()
    response = post_json(server.url(), BODY, 2)
    assert response.ok and response.body == b"kept"
    assert time.monotonic() - started < 1.0
    assert len(server.requests) == 1


def test_chunked_body_is_reassembled(serve):
    server = serve(chunked(b"hel", b"lo ", b"world"), protocol_version="HTTP/1.1")
    started = time.monotonic()
    response = post_json(server.url(), BODY, 2)
    assert response.ok and response.body == b"hello world" and not response.body_truncated
    assert ("Transfer-Encoding", "chunked") in response.headers
    assert time.monotonic() - started < 1.0


def test_connection_close_without_length_reads_until_the_close(serve):
    server = serve(close_delimited(b"first ", b"second ", b"third"), protocol_version="HTTP/1.1")
    response = post_json(server.url(), BODY, 2)
    assert response.ok and response.body == b"first second third"
    assert ("Connection", "close") in response.headers


# ------------------------------------------------------------------ time bounds


def test_server_slower_than_the_timeout(serve):
    server = serve(sleeps_then(200))
    started = time.monotonic()
    response = post_json(server.url(), BODY, 0.5)
    elapsed = time.monotonic() - started
    assert not response.ok and response.status is None
    assert response.error == "timed out after 500ms"
    assert 0.45 <= elapsed < 0.8
    assert len(server.requests) == 1  # the request did arrive


def test_trickling_server_is_cut_at_the_total_deadline(serve):
    """A byte every 0.2 s keeps every socket read short: only the total deadline ends this,
    and the abandoned connection is really cut (the server's writes start failing)."""
    server = serve(trickles(0.2))
    started = time.monotonic()
    response = post_json(server.url(), BODY, 0.7)
    elapsed = time.monotonic() - started
    assert response.error == "timed out after 700ms" and not response.ok
    assert elapsed < 0.7 + 0.3
    assert server.client_gone.wait(1.5), "the worker kept reading after the deadline"


def test_refused_connection(closed_port):
    started = time.monotonic()
    response = post_json(f"http://127.0.0.1:{closed_port}/hook", BODY, 2)
    assert response.status is None and not response.ok
    assert response.error.startswith("connection failed: ") and "refused" in response.error.lower()
    assert time.monotonic() - started < 1.0


# ------------------------------------------------------------------ statuses and bodies


def test_500_is_a_failure_with_the_body_excerpt(serve):
    server = serve(answer(500, b"database down\n"))
    response = post_json(server.url(), BODY, 2)
    assert not response.ok and response.error is None
    assert (response.status, response.reason, response.body) == (500, "Internal Server Error", b"database down\n")
    assert failure_reason(response) == "HTTP 500: database down"
    assert len(server.requests) == 1  # no retry


def test_redirect_is_not_followed(serve):
    server = serve(answer(302, b"", headers={"Location": "/target"}))
    response = post_json(server.url("/redirect"), BODY, 2)
    assert not response.ok and response.status == 302
    assert failure_reason(response) == "HTTP 302 Found"
    assert ("Location", "/target") in response.headers
    time.sleep(0.1)  # a followed redirect would have arrived by now
    assert server.paths() == ["/redirect"]


@pytest.mark.parametrize("respond, protocol", [
    (answer(200, b"y" * 10_000), "HTTP/1.1"),
    (answer(200, b"y" * 10_000, length=False), "HTTP/1.0"),
    (chunked(*[b"y" * 2_500] * 4), "HTTP/1.1"),
], ids=["content-length", "close-delimited", "chunked"])
def test_body_larger_than_the_cap_is_truncated(serve, respond, protocol):
    server = serve(respond, protocol_version=protocol)
    started = time.monotonic()
    response = post_json(server.url(), BODY, 2, max_response_bytes=1000)
    assert response.ok and response.body == b"y" * 1000 and response.body_truncated
    assert time.monotonic() - started < 1.0


def test_body_exactly_at_the_cap_is_not_truncated(serve):
    server = serve(answer(200, b"z" * 1000))
    response = post_json(server.url(), BODY, 2, max_response_bytes=1000)
    assert response.body == b"z" * 1000 and not response.body_truncated


# ------------------------------------------------------------------ broken servers


class _RawHandler(socketserver.StreamRequestHandler):
    reply = b""

    def handle(self):
        length = 0
        for line in iter(self.rfile.readline, b""):  # the whole request: closing on unread
            if line in (b"\r\n", b"\n"):            # bytes would reset the connection
                break
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        self.rfile.read(length)
        if self.reply:
            self.wfile.write(self.reply)


def _raw(reply: bytes):
    return type("Raw", (_RawHandler,), {"reply": reply})


class _ThreadingTCPServer(socketserver.ThreadingTCPServer):
    allow_reuse_address = True


@pytest.mark.parametrize("reply, expected", [
    (b"", "invalid HTTP response: RemoteDisconnected"),
    (b"SPEAK FRIEND\r\n\r\n", "invalid HTTP response: BadStatusLine"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nshort", "invalid HTTP response: IncompleteRead"),
], ids=["no-answer", "not-http", "short-body"])
def test_broken_answers_are_invalid_responses(serve, reply, expected):
    server = serve(None, server_class=_ThreadingTCPServer, handler=_raw(reply))
    response = post_json(server.url(), BODY, 2)
    assert not response.ok and response.error.startswith(expected), response.error


# ------------------------------------------------------------------ TLS


@pytest.fixture(scope="module")
def certificate(tmp_path_factory):
    """A self-signed certificate for 127.0.0.1: (cert file, key file)."""
    pytest.importorskip("cryptography")
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "lakefuse test")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    folder = tmp_path_factory.mktemp("tls")
    cert_file, key_file = folder / "cert.pem", folder / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return str(cert_file), str(key_file)


def _tls_server(serve, certificate) -> Server:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(*certificate)
    return serve(answer(200, b"secure"), tls=context)


def test_untrusted_certificate_is_a_tls_error(serve, certificate):
    server = _tls_server(serve, certificate)
    response = post_json(server.url(), BODY, 2)
    assert not response.ok and response.status is None
    assert response.error.startswith("TLS error: CERTIFICATE_VERIFY_FAILED"), response.error
    assert server.requests == []  # nothing was sent to an unverified server


def test_trusted_certificate_is_verified_and_used(serve, certificate, monkeypatch):
    monkeypatch.setattr(webhook, "_ca_bundle", lambda: certificate[0])
    server = _tls_server(serve, certificate)
    response = post_json(server.url(), BODY, 2)
    assert response.ok and response.body == b"secure", response.error
    assert json.loads(server.requests[0].body) == json.loads(BODY)


# ------------------------------------------------------------------ whole hook runs


@pytest.fixture
def runner(namespaces):
    return ActionsRunner(namespaces, http_timeout_default=2)


def _files(url: str, extra_props: str = "") -> list[tuple[str, bytes]]:
    return [("_lakefs_actions/check.yaml", action_yaml("Check", [("check", url)], extra_props=extra_props))]


def test_hook_run_against_an_http10_server_passes(serve, runner, namespaces):
    server = serve(answer(200, b"looks good", length=False))
    manifest = runner.pre_commit(make_event(_files(server.url())))
    assert manifest.passed and manifest.hooks[0].status == "passed"
    (seen,) = server.requests
    assert seen.headers["content-type"] == "application/json"
    payload = json.loads(seen.body)
    assert (payload["event_type"], payload["hook_id"], payload["branch_id"]) == ("pre-commit", "check", "main")
    log = RunStore(namespaces("repo1")).get_hook_log(manifest.run_id, "0000_0000").decode()
    assert "response: HTTP 200 OK" in log and "looks good" in log and "result: passed" in log


def test_hook_run_against_a_500_fails_the_commit_with_the_excerpt(serve, runner):
    server = serve(answer(500, b"database down"))
    with pytest.raises(HookFailed) as caught:
        runner.pre_commit(make_event(_files(server.url())))
    assert "hook 'check' of action 'Check' failed: HTTP 500: database down" in caught.value.message


def test_hook_run_against_a_redirect_fails_without_following(serve, runner):
    server = serve(answer(302, b"", headers={"Location": "/target"}))
    with pytest.raises(HookFailed) as caught:
        runner.pre_commit(make_event(_files(server.url("/redirect"))))
    assert "failed: HTTP 302 Found" in caught.value.message
    assert server.paths() == ["/redirect"]


def test_hook_run_against_a_trickling_server_times_out(serve, runner):
    server = serve(trickles(0.2))
    started = time.monotonic()
    with pytest.raises(HookFailed) as caught:
        runner.pre_commit(make_event(_files(server.url(), extra_props="timeout: 500ms")))
    assert "failed: timed out after 500ms" in caught.value.message
    assert time.monotonic() - started < 0.5 + 0.5
