"""/v1 against a hostile but authenticated client: a NUL in a sandbox id or file path must not
act on another object, a refused delete must delete nothing, numbers are parsed whole, text
that is not UTF-8 (from the client or from the sandbox) is replaced, never fatal, and every 405
says what is allowed. Each test also checks that the sandbox and the daemon are as they were."""
import json

import pytest

from helpers import rawhttp
from helpers.asserts import assert_v1_error, expect

pytestmark = pytest.mark.cellbox_only


def raw(daemon, method, target):
    """`target` is bytes sent as they are (a %00 stays a %00 on the wire)."""
    head = (method.encode() + b" /" + target + b" HTTP/1.1\r\nHost: x\r\n"
            + f"Authorization: token {daemon.token}\r\nConnection: close\r\n\r\n".encode())
    r = rawhttp.exchange(daemon.host, daemon.port, head)
    assert r is not None, f"no answer to {method} {target[:80]!r}"
    return r


def refused(r, *words):
    assert r.status == 400, (r, r.body[:300])
    message = json.loads(r.body)["message"]
    for w in words:
        assert w in message, message
    return message


def kernel_count(v1):
    return len(v1.client.get("api/kernels").json())


@pytest.fixture
def box(v1, fresh):
    """A fresh sandbox that has started (files and commands answer 409 while it starts)."""
    v1.execute(fresh["id"], "1")
    return fresh


@pytest.fixture(scope="module")
def shared(v1, sandbox):
    """The module's shared sandbox, started."""
    v1.execute(sandbox["id"], "1")
    return sandbox


def names(v1, sid, path="/workspace", depth=3):
    r = expect(v1.get(v1.files_url(sid, "list"), params={"path": path, "depth": depth}), 200)
    return sorted(e["path"] for e in r.json())


# ---------------------------------------------------------------- NUL in ids and paths

@pytest.mark.parametrize("byte", [b"%00", b"%0a", b"%7f"])
def test_nul_after_the_sandbox_id_deletes_nothing(v1, daemon, box, byte):
    sid = box["id"]
    v1.write(sid, "x", "keep")
    before = kernel_count(v1)
    refused(raw(daemon, "DELETE", f"v1/sandboxes/{sid}".encode() + byte + b"/files?path=x"),
            "control byte")
    refused(raw(daemon, "DELETE", f"v1/sandboxes/{sid}".encode() + byte), "control byte")
    assert v1.model(sid)["state"] == "running"
    assert v1.read(sid, "x") == b"keep"
    assert kernel_count(v1) == before


@pytest.mark.parametrize("action", ["restart", "pause", "contexts"])
def test_nul_after_the_sandbox_id_starts_nothing(v1, daemon, box, action):
    sid = box["id"]
    v1.execute(sid, "witness = 42")
    before = kernel_count(v1)
    refused(raw(daemon, "POST", f"v1/sandboxes/{sid}%00/{action}".encode()), "control byte")
    assert kernel_count(v1) == before
    assert v1.model(sid)["state"] == "running"
    assert v1.value(sid, "witness") == "42"  # the same kernel, not restarted


@pytest.mark.parametrize("query", [b"path=a%00b", b"path=a%0ab", b"path=a%1f", b"path=a%7f"])
def test_control_byte_in_path_query_touches_nothing(v1, daemon, box, query):
    sid = box["id"]
    v1.write(sid, "a", "keep")
    base = f"v1/sandboxes/{sid}/files?".encode()
    for method, target in (("DELETE", base + query), ("GET", base + query),
                           ("GET", f"v1/sandboxes/{sid}/files/list?".encode() + query)):
        refused(raw(daemon, method, target), "'path'", "control byte")
    assert v1.read(sid, "a") == b"keep"
    assert names(v1, sid) == ["/workspace/a"]


@pytest.mark.parametrize("bad", ["a\x01b", "a\nb", "a\x7f", "dir/\x1b[2J"])
def test_control_byte_in_a_json_path_touches_nothing(v1, box, bad):
    sid = box["id"]
    v1.write(sid, "a", "keep")
    assert_v1_error(v1.post(v1.files_url(sid, "mkdir"), json={"path": bad}), 400, "control byte")
    assert_v1_error(v1.post(v1.files_url(sid, "move"), json={"from": "a", "to": bad}), 400,
                 "control byte")
    assert_v1_error(v1.post(v1.files_url(sid, "batch"),
                         json={"files": [{"path": bad, "content": "x"}]}), 400, "control byte")
    assert v1.read(sid, "a") == b"keep"
    assert names(v1, sid) == ["/workspace/a"]


# ---------------------------------------------------------------- refused deletes

@pytest.mark.parametrize("path", ["/workspace", ".", "/workspace/.", "/tmp", "/"])
def test_deleting_a_mount_point_or_the_root_removes_nothing(v1, box, path):
    sid = box["id"]
    v1.write(sid, "a.txt", "a")
    v1.write(sid, "dir/b.txt", "b")
    v1.write(sid, "/tmp/t.txt", "t")
    r = v1.delete(v1.files_url(sid), params={"path": path, "recursive": "true"})
    assert_v1_error(r, 409, "cannot be")
    assert names(v1, sid) == ["/workspace/a.txt", "/workspace/dir", "/workspace/dir/b.txt"]
    assert "/tmp/t.txt" in names(v1, sid, "/tmp", 1)
    assert v1.value(sid, "open('/workspace/dir/b.txt').read()") == "'b'"


def test_recursive_delete_that_stops_says_what_it_removed(v1, box):
    # t/ro is read-only: its subdirectory's files go, the subdirectory itself cannot
    sid = box["id"]
    v1.write(sid, "t/ro/sub/one", "1")
    v1.write(sid, "t/ro/sub/two", "2")
    v1.execute(sid, "import os; os.chmod('/workspace/t/ro', 0o555)")
    r = v1.delete(v1.files_url(sid), params={"path": "t", "recursive": "true"})
    assert_v1_error(r, 403, "/workspace/t/ro/sub", "2 entries beneath '/workspace/t'",
                 "the rest is still there")
    assert names(v1, sid, "t") == ["/workspace/t/ro", "/workspace/t/ro/sub"]
    v1.execute(sid, "import os; os.chmod('/workspace/t/ro', 0o755)")
    expect(v1.delete(v1.files_url(sid), params={"path": "t", "recursive": "true"}), 204)


# ---------------------------------------------------------------- numbers

BAD_NUMBERS = ["abc", "5x", "", " 5", "+5", "1.5", "-1", "99999999999999999999", "%ff"]


@pytest.mark.parametrize("value", BAD_NUMBERS)
def test_query_numbers_are_parsed_whole(v1, daemon, shared, value):
    sid = shared["id"]
    command = v1.background(sid, "true")
    for target, name, accepted in (
            (f"v1/sandboxes/{sid}/commands/{command['id']}/wait?timeout_s=", "timeout_s",
             "from 0 to 604800"),
            (f"v1/sandboxes/{sid}/logs?limit=", "limit", "from 1 to 1000"),
            (f"v1/sandboxes/{sid}/files/list?path=.&depth=", "depth", "from 1 to 10")):
        message = refused(raw(daemon, "GET", target.encode() + value.encode()), f"'{name}'",
                          accepted)
        if value == "%ff":
            assert "\ufffd" in message  # the value is quoted, not as raw bytes


@pytest.mark.parametrize("value", ["yes", "2", "", "truee"])
def test_query_flags_are_true_or_false(v1, box, value):
    # 'recursive=yes' was silently 'no'
    sid = box["id"]
    v1.write(sid, "d/f", "keep")
    r = v1.delete(v1.files_url(sid), params={"path": "d", "recursive": value})
    assert_v1_error(r, 400, "'recursive'", "true or false")
    assert v1.read(sid, "d/f") == b"keep"


def test_query_flags_take_any_case(v1, box):
    sid = box["id"]
    v1.write(sid, "d/f", "x")
    assert_v1_error(v1.delete(v1.files_url(sid), params={"path": "d", "recursive": "FALSE"}), 409)
    expect(v1.delete(v1.files_url(sid), params={"path": "d", "recursive": "True"}), 204)


def test_query_numbers_in_range_still_work(v1, shared):
    sid = shared["id"]
    expect(v1.get(f"v1/sandboxes/{sid}/logs", params={"limit": "3"}), 200)
    expect(v1.get(v1.files_url(sid, "list"), params={"path": ".", "depth": "10"}), 200)
    command = v1.background(sid, "true")
    expect(v1.get(f"v1/sandboxes/{sid}/commands/{command['id']}/wait",
                  params={"timeout_s": "30"}), 200)


@pytest.mark.parametrize("memory", ["nan", "inf", "0x10000000", " 256M", "-256M"])
def test_sizes_are_parsed_whole(v1, memory):
    before = kernel_count(v1)
    assert_v1_error(v1.post("v1/sandboxes", json={"limits": {"memory": memory}}), 400, "memory")
    assert kernel_count(v1) == before


def test_body_number_out_of_range_names_the_range(v1):
    assert_v1_error(v1.post("v1/sandboxes", json={"timeout_s": 10 ** 12}), 400, "timeout_s",
                 "from 0 to 1000000000")


# ---------------------------------------------------------------- not UTF-8

def test_path_not_utf8_is_replaced_in_the_error(v1, daemon, shared):
    r = raw(daemon, "GET", f"v1/sandboxes/{shared['id']}/files?path=%ff%fe".encode())
    assert r.status == 404, r
    assert "\ufffd\ufffd" in json.loads(r.body.decode("utf-8"))["message"]
    r = raw(daemon, "GET", b"v1/sandboxes/\xff")
    assert r.status == 404 and "\ufffd" in json.loads(r.body.decode("utf-8"))["message"], r


def test_sandbox_bytes_not_utf8_are_replaced(v1, daemon, shared):
    sid = shared["id"]
    ev = v1.execute(sid, "import os, sys\n"
                         "sys.stdout.flush(); os.write(1, b'out \\xff\\xfe end\\n')\n"
                         "open(b'/workspace/n\\xffme', 'w').close()\n"
                         "raise ValueError('bad \\udcff')")
    assert "out \ufffd\ufffd end" in ev.stdout
    assert ev.errors  # the error's text had a lone surrogate: it arrives, replaced
    assert "/workspace/n\ufffdme" in names(v1, sid)
    ev = v1.command(sid, "printf 'cmd \\377 end\\n'")
    assert "cmd \ufffd end" in ev.stdout
    assert daemon.alive()


# ---------------------------------------------------------------- 405

SANDBOX_405 = [
    ("PUT", "", "GET, DELETE"),
    ("GET", "execute", "POST"),
    ("GET", "pause", "POST"),
    ("POST", "logs", "GET"),
    ("DELETE", "contexts", "GET, POST"),
    ("PUT", "commands", "GET, POST"),
    ("POST", "files", "GET, PUT, DELETE"),
    ("POST", "files/tar", "GET, PUT"),
    ("POST", "files/list", "GET"),
    ("GET", "files/mkdir", "POST"),
]


@pytest.mark.parametrize("method,sub,allow", SANDBOX_405, ids=[f"{m} {s}" for m, s, _ in SANDBOX_405])
def test_405_on_a_sandbox_says_what_is_allowed(v1, shared, method, sub, allow):
    path = f"v1/sandboxes/{shared['id']}" + (f"/{sub}" if sub else "")
    r = v1.request(method, path)
    assert_v1_error(r, 405, method)
    assert r.headers.get("Allow") == allow


def test_405_on_a_command_and_a_context_says_what_is_allowed(v1, shared):
    sid = shared["id"]
    command = v1.background(sid, "true")
    base = f"v1/sandboxes/{sid}/commands/{command['id']}"
    for method, path, allow in (("PUT", base, "GET, DELETE"), ("POST", base + "/wait", "GET"),
                                ("GET", base + "/kill", "POST")):
        r = v1.request(method, path)
        assert_v1_error(r, 405)
        assert r.headers.get("Allow") == allow, (method, path, r.headers)
    context = expect(v1.post(f"v1/sandboxes/{sid}/contexts", json={}), 201).json()
    base = f"v1/sandboxes/{sid}/contexts/{context['id']}"
    for method, path, allow in (("PUT", base, "GET, DELETE"), ("GET", base + "/restart", "POST")):
        r = v1.request(method, path)
        assert_v1_error(r, 405)
        assert r.headers.get("Allow") == allow, (method, path, r.headers)
    expect(v1.delete(base), 204)


# ---------------------------------------------------------------- E2B's uploads

@pytest.mark.parametrize("filename", ["a%00b", "a%0Ab"])
def test_e2b_upload_filename_with_control_byte_writes_nothing(v1, box, filename):
    # E2B's SDK escapes the part's filename; decoded, a NUL would cut the path short
    sid = box["id"]
    v1.write(sid, "a", "keep")
    body = (b"--XyZ\r\nContent-Disposition: form-data; name=\"file\"; filename=\""
            + filename.encode() + b"\"\r\nContent-Type: application/octet-stream\r\n\r\n"
            b"evil\r\n--XyZ--\r\n")
    r = v1.post("files", data=body, headers={"E2b-Sandbox-Id": sid, "E2b-Sandbox-Port": "49983",
                                             "Content-Type": "multipart/form-data; boundary=XyZ"})
    assert r.status_code == 400 and "control byte" in r.json()["message"], r.text
    assert v1.read(sid, "a") == b"keep"
    assert names(v1, sid) == ["/workspace/a"]
