"""Connect-RPC on the wire (api/connect.c), as E2B's SDKs call envd inside a sandbox:
POST /{package.Service}/{Method} with E2b-Sandbox-Id and E2b-Sandbox-Port 49983, unary
application/json (protojson). Answers are the response message, or Connect's error
{"code", "message"} with the HTTP status Connect gives the code. Streaming calls
(application/connect+json) are envelopes: a flag byte, a 4-byte big-endian length, the JSON; the
response ends with the end-of-stream envelope (flag 0x02), which carries a streaming call's
error."""
import http.client
import json
import os
import struct
import tempfile
import urllib.parse

import pytest
import requests

from helpers.connect_wire import envd_headers, envelope
from helpers.e2b import ENVD_PORT, api, made_sandbox

pytestmark = pytest.mark.cellbox_only  # Jupyter Server has no E2B API

def call(daemon, sandbox_id, path, body=b"{}", content_type="application/json", method="POST",
         headers=None):
    return requests.request(method, daemon.origin + path, data=body, timeout=60,
                            headers=envd_headers(daemon, sandbox_id, content_type, headers))


def connect_error(r, status, code):
    assert r.status_code == status, (r.status_code, r.text)
    assert r.headers["Content-Type"].startswith("application/json")
    body = r.json()
    assert set(body) == {"code", "message"} and body["code"] == code, body
    assert body["message"], body
    return body["message"]


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
    with made_sandbox(daemon, templateID="base", timeout=120) as created:
        yield created["sandboxID"]


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
                 "/process.Process/NoSuchMethod"]:
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


# ---- server streaming: WatchDir ----

class Stream:
    """A streaming call read envelope by envelope as it arrives (http.client: the socket's own
    timeout bounds every read, so nothing hangs)."""

    def __init__(self, daemon, sandbox_id, path, message, headers=None):
        url = urllib.parse.urlsplit(daemon.origin)
        self.connection = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
        sent = {"E2b-Sandbox-Id": sandbox_id, "E2b-Sandbox-Port": ENVD_PORT,
                "X-Access-Token": daemon.token, "Content-Type": "application/connect+json"}
        sent.update(headers or {})
        self.connection.request("POST", path, body=envelope(message), headers=sent)
        self.response = self.connection.getresponse()

    def next(self):
        """(flags, message) of the next envelope."""
        header = self.response.read(5)
        assert len(header) == 5, header
        flags, length = struct.unpack(">BI", header)
        return flags, json.loads(self.response.read(length))

    def next_event(self, skip_keepalives=True):
        """The next message, keepalives skipped; ("end", frame) for the end-of-stream frame."""
        for _ in range(1000):
            flags, message = self.next()
            if flags == 0x02:
                return "end", message
            if not (skip_keepalives and "keepalive" in message):
                return "message", message
        raise AssertionError("only keepalives")

    def close(self):
        self.connection.close()


def write_file(daemon, sandbox_id, path, data):
    r = requests.post(daemon.origin + "/files", params={"path": path}, data=data,
                      headers={"E2b-Sandbox-Id": sandbox_id, "E2b-Sandbox-Port": ENVD_PORT,
                               "X-Access-Token": daemon.token,
                               "Content-Type": "application/octet-stream"}, timeout=60)
    assert r.status_code == 200, r.text


def fs(daemon, sandbox_id, method, message):
    r = call(daemon, sandbox_id, f"/filesystem.Filesystem/{method}", json.dumps(message).encode())
    assert r.status_code == 200, (method, r.status_code, r.text)
    return r.json()


def filesystem_events(stream, count):
    """The next `count` filesystem events as (type, name)."""
    events = []
    for _ in range(count):
        kind, message = stream.next_event()
        assert kind == "message" and set(message) == {"filesystem"}, message
        events.append((message["filesystem"]["type"], message["filesystem"]["name"]))
    return events


def events_until(stream, last):
    """Filesystem events as (type, name) up to and including `last` (at most 50: an upload also
    reports the permissions and times it sets, as inotify does)."""
    events = []
    while last not in events:
        assert len(events) < 50, events
        events += filesystem_events(stream, 1)
    return events


def test_watch_dir_streams_start_then_events_in_envelopes(daemon, sandbox_id):
    fs(daemon, sandbox_id, "MakeDir", {"path": "/workspace/watched"})
    stream = Stream(daemon, sandbox_id, "/filesystem.Filesystem/WatchDir",
                    {"path": "/workspace/watched"})
    try:
        assert stream.response.status == 200
        assert stream.response.getheader("Content-Type") == "application/connect+json"
        assert stream.next() == (0, {"start": {}})
        write_file(daemon, sandbox_id, "/workspace/watched/a.txt", b"hello")
        events = events_until(stream, ("EVENT_TYPE_WRITE", "a.txt"))
        assert events[0] == ("EVENT_TYPE_CREATE", "a.txt"), events
        fs(daemon, sandbox_id, "Move", {"source": "/workspace/watched/a.txt",
                                        "destination": "/workspace/watched/b.txt"})
        events = events_until(stream, ("EVENT_TYPE_CREATE", "b.txt"))
        assert events[-2:] == [("EVENT_TYPE_RENAME", "a.txt"), ("EVENT_TYPE_CREATE", "b.txt")], \
            events
        fs(daemon, sandbox_id, "Remove", {"path": "/workspace/watched/b.txt"})
        assert events_until(stream, ("EVENT_TYPE_REMOVE", "b.txt"))[-1][1] == "b.txt"
    finally:
        stream.close()


def test_watch_dir_recursive_names_are_relative_and_entries_included(daemon, sandbox_id):
    fs(daemon, sandbox_id, "MakeDir", {"path": "/workspace/deep/old"})
    stream = Stream(daemon, sandbox_id, "/filesystem.Filesystem/WatchDir",
                    {"path": "/workspace/deep", "recursive": True, "includeEntry": True})
    try:
        assert stream.next() == (0, {"start": {}})
        write_file(daemon, sandbox_id, "/workspace/deep/old/x.txt", b"x")  # there at the start
        kind, message = stream.next_event()
        event = message["filesystem"]
        assert (event["type"], event["name"]) == ("EVENT_TYPE_CREATE", "old/x.txt"), message
        assert event["entry"]["path"] == "/workspace/deep/old/x.txt"
        assert event["entry"]["type"] == "FILE_TYPE_FILE"
        fs(daemon, sandbox_id, "MakeDir", {"path": "/workspace/deep/new"})  # made later: followed
        events = events_until(stream, ("EVENT_TYPE_CREATE", "new"))
        assert {name for _, name in events} <= {"old/x.txt", "new"}, events
        write_file(daemon, sandbox_id, "/workspace/deep/new/y.txt", b"y")
        events = events_until(stream, ("EVENT_TYPE_WRITE", "new/y.txt"))
        assert {name for _, name in events} == {"new/y.txt"}, events
    finally:
        stream.close()


def test_watch_dir_without_recursive_sees_only_the_top(daemon, sandbox_id):
    fs(daemon, sandbox_id, "MakeDir", {"path": "/workspace/flat/sub"})
    stream = Stream(daemon, sandbox_id, "/filesystem.Filesystem/WatchDir",
                    {"path": "/workspace/flat"})
    try:
        assert stream.next() == (0, {"start": {}})
        write_file(daemon, sandbox_id, "/workspace/flat/sub/hidden.txt", b"1")
        write_file(daemon, sandbox_id, "/workspace/flat/seen.txt", b"2")
        kind, message = stream.next_event()
        assert message["filesystem"]["name"] == "seen.txt", message  # nothing from sub/
    finally:
        stream.close()


def test_keepalives_come_at_the_interval_asked(daemon, sandbox_id):
    fs(daemon, sandbox_id, "MakeDir", {"path": "/workspace/quiet"})
    stream = Stream(daemon, sandbox_id, "/filesystem.Filesystem/WatchDir",
                    {"path": "/workspace/quiet"}, headers={"Keepalive-Ping-Interval": "1"})
    try:
        assert stream.next() == (0, {"start": {}})
        # a silent directory: the next envelopes are the method's keepalive message
        assert stream.next() == (0, {"keepalive": {}})
        assert stream.next() == (0, {"keepalive": {}})
    finally:
        stream.close()


def test_connect_timeout_ends_the_stream_with_deadline_exceeded(daemon, sandbox_id):
    fs(daemon, sandbox_id, "MakeDir", {"path": "/workspace/deadline"})
    stream = Stream(daemon, sandbox_id, "/filesystem.Filesystem/WatchDir",
                    {"path": "/workspace/deadline"}, headers={"Connect-Timeout-Ms": "300"})
    try:
        assert stream.next() == (0, {"start": {}})
        kind, end = stream.next_event()
        assert kind == "end" and end["error"]["code"] == "deadline_exceeded", end
        assert stream.response.read() == b""  # nothing after the end frame
    finally:
        stream.close()
    # the watch went with it: the sandbox can start as many as before
    for i in range(3):
        r = stream_call(daemon, sandbox_id, "/filesystem.Filesystem/WatchDir",
                        envelope({"path": "/workspace/deadline"}),
                        headers={"Connect-Timeout-Ms": "1"})
        assert r.status_code == 200


def test_streaming_request_errors_end_the_stream(daemon, sandbox_id):
    path = "/filesystem.Filesystem/WatchDir"
    good = envelope({"path": "/workspace"})
    stream_error(stream_call(daemon, sandbox_id, path, b'{"path": "/workspace"}'),
                 "invalid_argument")  # not an envelope
    stream_error(stream_call(daemon, sandbox_id, path, good + good), "invalid_argument")
    stream_error(stream_call(daemon, sandbox_id, path, good[:-1]), "invalid_argument")
    stream_error(stream_call(daemon, sandbox_id, path, envelope(b"{not json")), "invalid_argument")
    stream_error(stream_call(daemon, sandbox_id, path, envelope(b"{}", flags=1)), "unimplemented")
    stream_error(stream_call(daemon, sandbox_id, path, good,
                             headers={"Connect-Content-Encoding": "gzip"}), "unimplemented")
    stream_error(stream_call(daemon, sandbox_id, path, envelope({"path": "/workspace",
                                                                 "recursive": "yes"})),
                 "invalid_argument")
    stream_error(stream_call(daemon, sandbox_id, path, good,
                             headers={"Connect-Timeout-Ms": "later"}), "invalid_argument")
    message = stream_error(stream_call(daemon, sandbox_id, path,
                                       envelope({"path": "/workspace/no/such/dir"})), "not_found")
    assert "/workspace/no/such/dir" in message
    write_file(daemon, sandbox_id, "/workspace/plain.txt", b"file")
    stream_error(stream_call(daemon, sandbox_id, path, envelope({"path": "/workspace/plain.txt"})),
                 "invalid_argument")
    # the streaming codec only: a unary Content-Type is 415, naming the one to send
    r = call(daemon, sandbox_id, path, b'{"path": "/workspace"}')
    assert r.status_code == 415 and r.headers["Accept-Post"] == "application/connect+json", r.text


def test_a_paused_sandbox_is_not_watched_until_it_resumes(daemon, sandbox_id):
    """A call into a paused sandbox (one created without autoResume) is answered as E2B's proxy
    answers it, 502 naming the pause and what to do; once resumed, the watch starts."""
    r = daemon.client().post(f"v1/sandboxes/{sandbox_id}/pause")
    assert r.status_code == 200, r.text
    try:
        r = stream_call(daemon, sandbox_id, "/filesystem.Filesystem/WatchDir",
                        envelope({"path": "/workspace"}))
        assert r.status_code == 502, r.text
        assert "paused" in r.json()["message"] and "connect" in r.json()["message"]
    finally:
        r = daemon.client().post(f"v1/sandboxes/{sandbox_id}/resume")
        assert r.status_code == 200, r.text
    stream = Stream(daemon, sandbox_id, "/filesystem.Filesystem/WatchDir", {"path": "/workspace"})
    try:
        assert stream.next() == (0, {"start": {}})
    finally:
        stream.close()


def test_a_planted_link_cannot_make_the_daemon_watch_a_host_directory(daemon, sandbox_id):
    """A link inside the sandbox towards a host directory resolves inside the sandbox (where the
    path does not exist): the watch fails and the host directory is untouched."""
    host = tempfile.mkdtemp(prefix="cellbox-watch-host-")
    try:
        r = daemon.client().post(f"v1/sandboxes/{sandbox_id}/execute", json={
            "code": f"import os\nos.symlink({host!r}, '/workspace/to-host')"})
        assert r.status_code == 200, r.text
        message = stream_error(stream_call(daemon, sandbox_id, "/filesystem.Filesystem/WatchDir",
                                           envelope({"path": "/workspace/to-host"})), "not_found")
        assert "to-host" in message or host in message
        r = call(daemon, sandbox_id, "/filesystem.Filesystem/CreateWatcher",
                 json.dumps({"path": "/workspace/to-host"}).encode())
        connect_error(r, 404, "not_found")
        assert os.listdir(host) == []
    finally:
        os.rmdir(host)


def test_a_recursive_watch_does_not_follow_links_out_to_the_host(daemon, sandbox_id):
    """Links planted inside a recursively watched directory, before the watch and while it
    runs, point at a host directory: changes the host makes there are never reported, and the
    host directory keeps exactly what the host put in it."""
    host = tempfile.mkdtemp(prefix="cellbox-watch-host-")
    try:
        fs(daemon, sandbox_id, "MakeDir", {"path": "/workspace/trap"})
        r = daemon.client().post(f"v1/sandboxes/{sandbox_id}/execute", json={
            "code": f"import os\nos.symlink({host!r}, '/workspace/trap/before')"})
        assert r.status_code == 200, r.text
        stream = Stream(daemon, sandbox_id, "/filesystem.Filesystem/WatchDir",
                        {"path": "/workspace/trap", "recursive": True})
        try:
            assert stream.next() == (0, {"start": {}})
            r = daemon.client().post(f"v1/sandboxes/{sandbox_id}/execute", json={
                "code": f"import os\nos.symlink({host!r}, '/workspace/trap/during')"})
            assert r.status_code == 200, r.text
            with open(os.path.join(host, "host-file.txt"), "w") as f:
                f.write("written by the host")
            write_file(daemon, sandbox_id, "/workspace/trap/marker.txt", b"m")
            events = events_until(stream, ("EVENT_TYPE_WRITE", "marker.txt"))
            names = {name for _, name in events}
            assert names <= {"during", "marker.txt"}, events  # the link itself, nothing through it
        finally:
            stream.close()
        assert os.listdir(host) == ["host-file.txt"]
    finally:
        for name in os.listdir(host):
            os.unlink(os.path.join(host, name))
        os.rmdir(host)


# ---- the polling watchers ----

def test_polling_watcher_accumulates_events_between_polls(daemon, sandbox_id):
    fs(daemon, sandbox_id, "MakeDir", {"path": "/workspace/polled"})
    watcher_id = fs(daemon, sandbox_id, "CreateWatcher", {"path": "/workspace/polled"})["watcherId"]
    assert watcher_id
    assert fs(daemon, sandbox_id, "GetWatcherEvents", {"watcherId": watcher_id}) == {"events": []}
    write_file(daemon, sandbox_id, "/workspace/polled/one.txt", b"1")
    fs(daemon, sandbox_id, "Remove", {"path": "/workspace/polled/one.txt"})
    events = fs(daemon, sandbox_id, "GetWatcherEvents", {"watcherId": watcher_id})["events"]
    seen = [(e["type"], e["name"]) for e in events]
    assert seen[0] == ("EVENT_TYPE_CREATE", "one.txt") and seen[-1] == ("EVENT_TYPE_REMOVE", "one.txt"), seen
    # taken: the next poll starts empty
    assert fs(daemon, sandbox_id, "GetWatcherEvents", {"watcherId": watcher_id}) == {"events": []}
    assert fs(daemon, sandbox_id, "RemoveWatcher", {"watcherId": watcher_id}) == {}
    for method in ["GetWatcherEvents", "RemoveWatcher"]:
        r = call(daemon, sandbox_id, f"/filesystem.Filesystem/{method}",
                 json.dumps({"watcherId": watcher_id}).encode())
        assert watcher_id in connect_error(r, 404, "not_found")


def test_unknown_watcher_is_not_found_and_watchers_die_with_their_sandbox(daemon):
    r = api(daemon, "POST", "/sandboxes", json={"templateID": "base", "timeout": 120})
    assert r.status_code == 201, r.text
    sid = r.json()["sandboxID"]
    try:
        connect_error(call(daemon, sid, "/filesystem.Filesystem/GetWatcherEvents",
                           b'{"watcherId": "w-no-such"}'), 404, "not_found")
        watcher_id = fs(daemon, sid, "CreateWatcher", {"path": "/workspace"})["watcherId"]
        stream = Stream(daemon, sid, "/filesystem.Filesystem/WatchDir", {"path": "/workspace"})
        assert stream.next() == (0, {"start": {}})
    finally:
        api(daemon, "DELETE", f"/sandboxes/{sid}")
    try:
        kind, end = stream.next_event()
        assert kind == "end" and end["error"]["code"] == "unavailable", end
        assert sid in end["error"]["message"]
    finally:
        stream.close()
    assert call(daemon, sid, "/filesystem.Filesystem/GetWatcherEvents",
                json.dumps({"watcherId": watcher_id}).encode()).status_code == 502


def test_watches_per_sandbox_are_bounded(daemon, sandbox_id):
    ids = []
    try:
        for _ in range(64):
            r = call(daemon, sandbox_id, "/filesystem.Filesystem/CreateWatcher",
                     b'{"path": "/workspace"}')
            if r.status_code != 200:
                break
            ids.append(r.json()["watcherId"])
        message = connect_error(r, 429, "resource_exhausted")
        assert "32" in message
        assert len(ids) <= 32
    finally:
        for watcher_id in ids:
            fs(daemon, sandbox_id, "RemoveWatcher", {"watcherId": watcher_id})
    # freed: one can be made again
    watcher_id = fs(daemon, sandbox_id, "CreateWatcher", {"path": "/workspace"})["watcherId"]
    fs(daemon, sandbox_id, "RemoveWatcher", {"watcherId": watcher_id})
