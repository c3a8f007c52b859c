"""A hostile but authenticated client, at the HTTP level: bytes that are not UTF-8, NULs and
control bytes in paths and queries, framing a proxy could read two ways, a body larger than
the limit, and wrong methods. Each gets the documented JSON error, and the daemon stays up with
its kernels untouched. (The same for /v1's sandboxes, files and numbers: tests/api/test_v1_hostile.py.)"""
import json

import pytest
import requests

from helpers import rawhttp

pytestmark = pytest.mark.cellbox_only


def send(daemon, head, body=b""):
    """One raw request: `head` is the request line and any extra header lines (bytes, each
    ending in CRLF); Host, the token and Connection: close are added."""
    auth = f"Host: x\r\nAuthorization: token {daemon.token}\r\nConnection: close\r\n".encode()
    line, _, extra = head.partition(b"\r\n")
    r = rawhttp.exchange(daemon.host, daemon.port, line + b"\r\n" + auth + extra + b"\r\n" + body)
    assert r is not None, f"no answer to {head[:80]!r}"
    return r


def json_error(r, status):
    assert r.status == status, (r, r.body[:300])
    assert r.headers.get("content-type", "").startswith("application/json"), r
    body = json.loads(r.body.decode("utf-8"))  # strict: the body must be valid UTF-8
    assert body["reason"] and body["message"], body
    return body


def assert_daemon_fine(daemon, cb, kernels_before):
    assert daemon.alive(), daemon.log_tail()
    assert "out of memory" not in daemon.log_text()
    assert cb.get("api").status_code == 200
    assert sorted(k["id"] for k in cb.get("api/kernels").json()) == kernels_before


def kernel_ids(cb):
    return sorted(k["id"] for k in cb.get("api/kernels").json())


# ---------------------------------------------------------------- bytes that are not UTF-8

NOT_UTF8_PATHS = {
    "escaped 0xff": b"/api/kernels/%ff",
    "raw 0xff 0xfe": b"/api/kernels/\xff\xfe",
    "cut character": b"/api/kernels/%c3",
    "overlong": b"/api/kernels/%c0%af",
    "surrogate": b"/api/kernels/%ed%a0%80",
}


@pytest.mark.parametrize("path", NOT_UTF8_PATHS.values(), ids=NOT_UTF8_PATHS.keys())
def test_path_not_utf8_is_replaced_in_the_error(daemon, cb, kernel, path):
    before = kernel_ids(cb)
    body = json_error(send(daemon, b"GET " + path + b" HTTP/1.1\r\n"), 404)
    assert "\ufffd" in body["message"], body
    assert_daemon_fine(daemon, cb, before)


def test_character_cut_by_the_message_buffer_stays_valid(daemon, cb, kernel):
    # An odd prefix puts the 1024-byte message buffer's end inside a two-byte "é".
    before = kernel_ids(cb)
    path = b"/api/kernels/x" + "é".encode() * 700
    body = json_error(send(daemon, b"GET " + path + b" HTTP/1.1\r\n"), 404)
    assert body["message"].startswith("Kernel does not exist: xé"), body["message"][:60]
    assert_daemon_fine(daemon, cb, before)


def test_query_key_not_utf8_in_a_refusal(daemon, cb):
    body = json_error(send(daemon, b"GET /api/kernels?%ff%01=1 HTTP/1.1\r\n"), 400)
    assert "\ufffd" in body["message"], body
    assert daemon.alive()


# ---------------------------------------------------------------- NUL and control bytes

@pytest.mark.parametrize("byte", ["%00", "%01", "%0a", "%1f", "%7f"])
def test_control_byte_in_kernel_id_acts_on_nothing(daemon, cb, kernel, byte):
    before = kernel_ids(cb)
    kid = kernel["id"].encode()
    for head in (b"DELETE /api/kernels/" + kid + byte.encode() + b" HTTP/1.1\r\n",
                 b"POST /api/kernels/" + kid + byte.encode() + b"/restart HTTP/1.1\r\n",
                 b"POST /api/kernels/" + kid + byte.encode() + b"/interrupt HTTP/1.1\r\n"):
        body = json_error(send(daemon, head, b""), 400)
        assert "control byte" in body["message"], body
    assert_daemon_fine(daemon, cb, before)
    assert cb.get(f"api/kernels/{kernel['id']}").json()["execution_state"] != "dead"


@pytest.mark.parametrize("query", [b"name=a%00b", b"x=%0d%0a", b"a%00=1", b"%00=1", b"t=%7f"])
def test_control_byte_in_query_names_the_parameter(daemon, cb, query):
    body = json_error(send(daemon, b"GET /api/kernels?" + query + b" HTTP/1.1\r\n"), 400)
    name = query.split(b"=")[0].split(b"%")[0].decode()
    assert f"query parameter '{name}" in body["message"], body
    assert "control byte" in body["message"], body


# ---------------------------------------------------------------- framing

def test_long_url_is_414_in_json(daemon, cb):
    body = json_error(send(daemon, b"GET /api/kernels/" + b"a" * 30000 + b" HTTP/1.1\r\n"), 414)
    assert "24576" in body["message"], body
    assert send(daemon, b"GET /api/kernels/" + b"a" * 20000 + b" HTTP/1.1\r\n").status == 404


def test_large_headers_are_431_in_json(daemon, cb):
    many = b"".join(b"X-Pad-%d: %s\r\n" % (i, b"b" * 900) for i in range(40))
    body = json_error(send(daemon, b"GET /api HTTP/1.1\r\n" + many), 431)
    assert "32768" in body["message"], body
    assert send(daemon, b"GET /api HTTP/1.1\r\nX-Pad: " + b"b" * 20000 + b"\r\n").status == 200


def test_heads_past_the_library_memory_still_get_an_answer(daemon, cb):
    # libmicrohttpd answers these itself, in HTML (docs/api.md says why): the status is right
    # and the daemon carries on
    r = send(daemon, b"GET /api/kernels/" + b"a" * 200000 + b" HTTP/1.1\r\n")
    assert r.status == 414, r
    r = send(daemon, b"GET /api HTTP/2.0\r\n")
    assert r.status == 505, r
    assert daemon.alive() and cb.get("api").status_code == 200

def test_two_different_content_lengths_are_refused(daemon, cb):
    before = kernel_ids(cb)
    r = send(daemon, b"POST /api/kernels HTTP/1.1\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 2\r\nContent-Length: 20\r\n", b'{}{"name": "python3"}')
    assert "Content-Length" in json_error(r, 400)["message"]
    assert_daemon_fine(daemon, cb, before)


def test_content_length_with_chunked_is_refused(daemon, cb):
    before = kernel_ids(cb)
    r = send(daemon, b"POST /api/kernels HTTP/1.1\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 2\r\nTransfer-Encoding: chunked\r\n", b"2\r\n{}\r\n0\r\n\r\n")
    message = json_error(r, 400)["message"]
    assert "Content-Length" in message and "Transfer-Encoding" in message, message
    assert_daemon_fine(daemon, cb, before)


@pytest.mark.parametrize("coding", [b"gzip", b"chunked, gzip", b"identity"])
def test_other_transfer_codings_are_not_implemented(daemon, cb, coding):
    # answered at once: the socket's timeout in send() bounds the wait, no timing is asserted
    before = kernel_ids(cb)
    r = send(daemon, b"POST /api/kernels HTTP/1.1\r\nTransfer-Encoding: " + coding + b"\r\n",
             b"\x1f\x8b")
    assert coding.decode() in json_error(r, 501)["message"]
    assert_daemon_fine(daemon, cb, before)


def test_chunked_alone_still_works(daemon, cb):
    r = send(daemon, b"POST /api/kernels HTTP/1.1\r\nContent-Type: application/json\r\n"
                     b"Transfer-Encoding: chunked\r\n", b"2\r\n{}\r\n0\r\n\r\n")
    assert r.status == 201, r
    cb.delete(f"api/kernels/{json.loads(r.body)['id']}")


def test_client_reads_the_413_while_still_uploading(make_daemon):
    # python-requests sends the whole body before reading: a reset would lose the answer
    d = make_daemon(args=["--max-body-size", "65536"])
    url = f"{d.origin}/api/kernels"
    headers = {"Authorization": f"token {d.token}", "Content-Type": "application/json"}
    for size in (100_000, 8 << 20):
        r = requests.post(url, data=b"x" * size, headers=headers, timeout=60)
        assert r.status_code == 413, r.text
        assert "65536" in r.json()["message"]
    assert requests.get(f"{d.origin}/api", headers=headers, timeout=30).ok


# ---------------------------------------------------------------- 405

METHOD_NOT_ALLOWED = [
    ("DELETE", "api", "GET"),
    ("PUT", "api/kernels", "GET, POST"),
    ("POST", "api/kernelspecs", "GET"),
    ("PUT", "api/sessions", "GET, POST"),
    ("PUT", "v1/sandboxes", "GET, POST"),
    ("GET", "v1/run", "POST"),
    ("PUT", "v1/templates", "GET, POST"),
    ("GET", "mcp", "POST, DELETE"),
    ("PUT", "mcp", "POST, DELETE"),
    ("PUT", "sandboxes", "GET, POST"),  # E2B's control plane
]


@pytest.mark.parametrize("method,path,allow", METHOD_NOT_ALLOWED,
                         ids=[f"{m} {p}" for m, p, _ in METHOD_NOT_ALLOWED])
def test_405_says_what_is_allowed(daemon, cb, method, path, allow):
    r = cb.request(method, path)
    assert r.status_code == 405, r.text
    assert r.headers.get("Allow") == allow
    assert allow.split(",")[0] in r.json()["message"]  # and says what to use


def test_405_on_a_kernel_says_what_is_allowed(cb, kernel):
    r = cb.request("PUT", f"api/kernels/{kernel['id']}")
    assert r.status_code == 405 and r.headers.get("Allow") == "GET, DELETE", r.text
    r = cb.request("GET", f"api/kernels/{kernel['id']}/restart")
    assert r.status_code == 405 and r.headers.get("Allow") == "POST", r.text
