"""The webhook POST against a real loopback server: statuses, bounded bodies, total timeout,
unreachable hosts, query strings."""

from __future__ import annotations

import json
import time

import pytest

from lakefuse.actions.runner import failure_reason
from lakefuse.actions.webhook import build_url, post_json

BODY = json.dumps({"hello": "world"}).encode()


def test_ok_posts_json(hook_server):
    response = post_json(hook_server.url("/ok"), BODY, 5)
    assert response.ok and response.status == 200 and response.body == b"ok"
    (request,) = hook_server.requests
    assert request.method == "POST"
    assert request.headers["content-type"] == "application/json"
    assert request.json() == {"hello": "world"}


def test_non_2xx_is_a_failure_with_a_bounded_excerpt(hook_server):
    forbidden = post_json(hook_server.url("/forbidden"), BODY, 5)
    assert not forbidden.ok and forbidden.status == 403
    assert failure_reason(forbidden) == "HTTP 403: no temporary files allowed: tmp/a.txt"

    error = post_json(hook_server.url("/error"), BODY, 5, max_response_bytes=1000)
    assert error.status == 500 and len(error.body) == 1000 and error.body_truncated
    reason = failure_reason(error)
    assert reason.startswith("HTTP 500: boom xxx") and reason.endswith("...")
    assert len(reason) < 600

    redirect = post_json(hook_server.url("/redirect"), BODY, 5)
    assert not redirect.ok and failure_reason(redirect) == "HTTP 302 Found"


def test_timeout_is_total_and_fails_fast(hook_server):
    started = time.monotonic()
    response = post_json(hook_server.url("/slow"), BODY, 0.3)
    elapsed = time.monotonic() - started
    assert not response.ok and response.error == "timed out after 300ms"
    assert 0.25 <= elapsed < 1.5


def test_timeout_bounds_a_response_that_trickles(hook_server):
    """Each read gets a byte within 50 ms, so only a total deadline stops this one."""
    started = time.monotonic()
    response = post_json(hook_server.url("/trickle"), BODY, 0.4)
    assert not response.ok and response.error == "timed out after 400ms"
    assert time.monotonic() - started < 1.5


def test_unreachable_url_is_a_connection_failure(closed_port):
    started = time.monotonic()
    response = post_json(f"http://127.0.0.1:{closed_port}/hook", BODY, 5)
    assert not response.ok and response.status is None
    assert response.error.startswith("connection failed") and "refused" in response.error.lower()
    assert time.monotonic() - started < 2


@pytest.mark.parametrize("url, params, expected", [
    ("http://h/p", [], "http://h/p"),
    ("http://h/p", [("a", ("1",))], "http://h/p?a=1"),
    ("http://h/p?x=1", [("a", ("1", "2")), ("b", ("c d",))], "http://h/p?x=1&a=1&a=2&b=c+d"),
    ("http://h/p?", [("a", ("/",))], "http://h/p?a=%2F"),
])
def test_build_url(url, params, expected):
    assert build_url(url, params) == expected
