"""Connect-RPC on the wire (api/connect.c), as E2B's SDKs call envd inside a sandbox:
POST /{package.Service}/{Method} with E2b-Sandbox-Id and E2b-Sandbox-Port 49983, unary
application/json (protojson). Answers are the response message, or Connect's error
{"code", "message"} with the HTTP status Connect gives the code. Streaming calls
(application/connect+json) are envelopes: a flag byte, a 4-byte big-endian length, the JSON; the
response ends with the end-of-stream envelope (flag 0x02), which carries a streaming call's
error."""
import json
import struct

import pytest
import requests

pytestmark = pytest.mark.cellbox_only  # Jupyter Server has no E2B API

ENVD = "49983"


def api(daemon, method, path, **kw):
    return requests.request(method, daemon.origin + path, headers={"X-API-Key": daemon.token},
                            timeout=60, **kw)


def call(daemon, sandbox_id, path, body=b"{}", content_type="application/json", method="POST",
         headers=None):
    sent = {"E2b-Sandbox-Id": sandbox_id, "E2b-Sandbox-Port": ENVD, "X-Access-Token": daemon.token,
            "Content-Type": content_type, "Connect-Protocol-Version": "1"}
    sent.update(headers or {})
    return requests.request(method, daemon.origin + path, headers=sent, data=body, timeout=60)


def connect_error(r, status, code):
    assert r.status_code == status, (r.status_code, r.text)
    assert r.headers["Content-Type"].startswith("application/json")
    body = r.json()
    assert set(body) == {"code", "message"} and body["code"] == code, body
    assert body["message"], body
    return body["message"]


def envelope(message, flags=0):
    data = message if isinstance(message, bytes) else json.dumps(message).encode()
    return struct.pack(">BI", flags, len(data)) + data


def frames(data):
    """The envelopes of a streaming response body: [(flags, message)]; the body must end with
    exactly one end-of-stream envelope, last."""
    out = []
    while data:
        assert len(data) >= 5, data
        flags, length = struct.unpack(">BI", data[:5])
        assert len(data) >= 5 + length, data
        out.append((flags, json.loads(data[5:5 + length])))
        data = data[5 + length:]
    assert out and out[-1][0] == 0x02, out
    assert all(flags == 0 for flags, _ in out[:-1]), out
    return out


def stream_call(daemon, sandbox_id, path, body, headers=None):
    return call(daemon, sandbox_id, path, body, content_type="application/connect+json",
                headers=headers)


def stream_error(r, code):
    """A failed streaming call: HTTP 200 and only the end-of-stream frame, naming the error."""
    assert r.status_code == 200, (r.status_code, r.text)
    assert r.headers["Content-Type"] == "application/connect+json"
    ((flags, end),) = frames(r.content)
    assert set(end) == {"error"} and end["error"]["code"] == code, end
    assert end["error"]["message"]
    return end["error"]["message"]


@pytest.fixture(scope="module")
def sandbox_id(daemon):
    r = api(daemon, "POST", "/sandboxes", json={"templateID": "base", "timeout": 120})
    assert r.status_code == 201, r.text
    sid = r.json()["sandboxID"]
    yield sid
    api(daemon, "DELETE", f"/sandboxes/{sid}")


def test_unary_answer_is_the_response_message_in_protojson(daemon, sandbox_id):
    r = call(daemon, sandbox_id, "/filesystem.Filesystem/MakeDir", b'{"path": "/workspace/wire"}')
    assert r.status_code == 200 and r.headers["Content-Type"].startswith("application/json"), r.text
    entry = r.json()["entry"]
    assert entry["name"] == "wire" and entry["path"] == "/workspace/wire"
    assert entry["type"] == "FILE_TYPE_DIRECTORY"  # enums by name
    assert entry["size"].isdigit()  # int64 as a string
    assert entry["mode"] == 0o20000000755 and entry["permissions"] == "drwxr-xr-x"
    assert entry["modifiedTime"].endswith("Z")
    assert entry["owner"] == "user" and entry["group"] == "user"
    r = call(daemon, sandbox_id, "/filesystem.Filesystem/Stat", b'{"path": "/etc"}')
    assert r.status_code == 200 and r.json()["entry"]["owner"] == "root", r.text
    r = call(daemon, sandbox_id, "/filesystem.Filesystem/ListDir",
             b'{"path": "/workspace", "depth": "1", "someFutureField": true}')  # uint32 as string
    assert r.status_code == 200, r.text
    assert "/workspace/wire" in [e["path"] for e in r.json()["entries"]]
    r = call(daemon, sandbox_id, "/filesystem.Filesystem/Remove", b'{"path": "wire"}')
    assert r.status_code == 200 and r.json() == {}, r.text
    r = call(daemon, sandbox_id, "/filesystem.Filesystem/Stat", b'{"path": "/workspace/wire"}')
    connect_error(r, 404, "not_found")


def test_bad_json_is_invalid_argument(daemon, sandbox_id):
    for body in [b"{not json", b"[1, 2]", b'{"path": 7}']:
        connect_error(call(daemon, sandbox_id, "/filesystem.Filesystem/Stat", body), 400,
                      "invalid_argument")
    message = connect_error(call(daemon, sandbox_id, "/filesystem.Filesystem/Stat", b"{}"), 400,
                            "invalid_argument")
    assert "'path'" in message
    r = call(daemon, sandbox_id, "/filesystem.Filesystem/ListDir",
             b'{"path": "/workspace", "depth": -1}')
    connect_error(r, 400, "invalid_argument")


def test_bad_protocol_headers_are_invalid_argument(daemon, sandbox_id):
    path = "/filesystem.Filesystem/Stat"
    body = b'{"path": "/workspace"}'
    connect_error(call(daemon, sandbox_id, path, body, headers={"Connect-Protocol-Version": "2"}),
                  400, "invalid_argument")
    connect_error(call(daemon, sandbox_id, path, body, headers={"Connect-Timeout-Ms": "soon"}),
                  400, "invalid_argument")
    r = call(daemon, sandbox_id, path, body, headers={"Connect-Timeout-Ms": "5000"})
    assert r.status_code == 200 and r.json()["entry"]["path"] == "/workspace", r.text


def test_unknown_and_streaming_methods_are_unimplemented(daemon, sandbox_id):
    for path in ["/filesystem.Filesystem/NoSuchMethod", "/no.Such/Service",
                 "/filesystem.Filesystem/WatchDir", "/process.Process/NoSuchMethod"]:
        message = connect_error(call(daemon, sandbox_id, path), 404, "unimplemented")
        assert path[1:] in message


def test_a_streaming_call_of_an_unknown_method_ends_with_unimplemented(daemon, sandbox_id):
    for path in ["/filesystem.Filesystem/NoSuchMethod", "/no.Such/Service"]:
        message = stream_error(stream_call(daemon, sandbox_id, path, envelope({})), "unimplemented")
        assert path[1:] in message


def test_streaming_codecs_other_than_json_are_415(daemon, sandbox_id):
    r = call(daemon, sandbox_id, "/filesystem.Filesystem/Stat", envelope({"path": "/"}),
             content_type="application/connect+json")
    assert r.status_code == 415 and r.headers["Accept-Post"] == "application/json", r.text


def test_other_codecs_are_415(daemon, sandbox_id):
    r = call(daemon, sandbox_id, "/filesystem.Filesystem/Stat", b"\x0a\x01/",
             content_type="application/proto")
    assert r.status_code == 415 and r.headers["Accept-Post"] == "application/json", r.text


def test_errors_map_from_errno(daemon, sandbox_id):
    call(daemon, sandbox_id, "/filesystem.Filesystem/MakeDir", b'{"path": "/workspace/twice"}')
    r = call(daemon, sandbox_id, "/filesystem.Filesystem/MakeDir", b'{"path": "/workspace/twice"}')
    connect_error(r, 409, "already_exists")
    r = call(daemon, sandbox_id, "/filesystem.Filesystem/MakeDir", b'{"path": "/proc/x"}')
    connect_error(r, 403, "permission_denied")
    r = call(daemon, sandbox_id, "/filesystem.Filesystem/Move",
             b'{"source": "/workspace/none", "destination": "/workspace/b"}')
    connect_error(r, 404, "not_found")


def test_a_sandbox_that_is_gone_is_502(daemon):
    r = call(daemon, "no-such-sandbox", "/filesystem.Filesystem/Stat", b'{"path": "/"}')
    assert r.status_code == 502
