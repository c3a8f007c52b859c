"""File metadata (envd 0.6.2) and the envd version cellbox reports (0.6.4), through E2B's
official SDK (npm `e2b`) and on the wire.

- The SDK (tests/clients/node/e2b_metadata.mjs): the sandbox reports envd 0.6.4, so the SDK
  sends files.write's {metadata} instead of refusing it (TemplateError below 0.6.2); the write's
  answer, getInfo and list show it, as a form and as a stream; an overwrite replaces it and one
  without metadata clears it; a file written without metadata has none; several files of one
  form share it; keys and sizes past the limits are InvalidArgumentError naming the limit, and
  leave no file; watchDir with includeEntry and allowNetworkMounts carries it in its entries.
- On the wire: envd's X-Metadata-<key> headers (keys in lower case), Connect's Stat, /v1's stat
  and list showing the same map, a refused set answered 400 in E2B's shape before any byte is
  written, the first of a repeated header kept, metadata a sandboxed program sets itself
  (user.e2b.* attributes) shown, except what is not UTF-8, and links a sandboxed program plants
  towards a host file never reaching it (neither its attributes read nor new ones set).
- /v1's PUT takes the same headers and replaces a file's metadata the same way.

The npm packages come from `scripts/install-deps.sh test` (npm ci in tests/clients/node)."""
import http.client
import json
import os
import tempfile

import pytest

from helpers.e2b import ENVD_PORT, api, into_envd, made_sandbox
from helpers.node_clients import assert_every_step_passed, run_e2b_script
from urllib.parse import urlsplit

pytestmark = pytest.mark.cellbox_only  # Jupyter Server has no E2B API

TIMEOUT = 150


def test_sdk_metadata(daemon):
    proc, steps, detail = run_e2b_script(daemon, "e2b_metadata.mjs", TIMEOUT)
    expected = ["create", "write_form", "write_stream", "overwrite", "without_metadata",
                "several_files", "limits", "watch_include_entry", "kill"]
    assert_every_step_passed(proc, steps, detail, expected)

    assert steps["create"]["envd_version"] == "0.6.4"
    tags = {"author": "ann", "purpose": "quarterly report"}
    form = steps["write_form"]
    assert form["written"] == tags and form["info"] == tags and form["listed"] == tags
    stream = steps["write_stream"]
    assert stream["written"] == {"source": "stream"} and stream["listed"] == {"source": "stream"}
    assert stream["content"] == "streamed"

    over = steps["overwrite"]
    assert over["replaced"] == {"author": "bob"}, "the key arrives in lower case, the old set is gone"
    assert over["after_replace"] == {"info": {"author": "bob"}, "listed": {"author": "bob"}}
    assert over["cleared"] is None and over["after_clear"] == {"info": None, "listed": None}

    plain = steps["without_metadata"]
    assert not plain["written_has_key"] and plain["info"] is None and plain["listed"] is None

    many = steps["several_files"]
    assert many["written"] == [{"batch": "7"}, {"batch": "7"}]
    assert many["a"]["info"] == {"batch": "7"} and many["b"]["listed"] == {"batch": "7"}

    limits = steps["limits"]
    assert limits["long_key"]["name"] == "InvalidArgumentError"
    assert "247 bytes; keys are at most 246" in limits["long_key"]["message"], limits
    assert limits["too_much"]["name"] == "InvalidArgumentError"
    assert "at most 4096" in limits["too_much"]["message"], limits
    assert limits["left"] == [False, False], "a refused write leaves no file"
    assert limits["longest_key_length"] == 246

    watch = steps["watch_include_entry"]
    moved = [e for e in watch["events"] if e["name"] == "after.txt" and e["metadata"]]
    assert moved and moved[0]["metadata"] == {"watched": "yes"}, watch


# ---- on the wire ----

@pytest.fixture
def sandbox(daemon):
    with made_sandbox(daemon, "/v2/sandboxes", templateID="code-interpreter-v1", timeout=120) as created:
        yield created


def upload(daemon, sandbox, path, body, metadata_headers):
    return into_envd(daemon, sandbox, "POST", "/files", params={"path": path}, data=body,
                headers={"Content-Type": "application/octet-stream", **metadata_headers})


def stat(daemon, sandbox, path):
    return into_envd(daemon, sandbox, "POST", "/filesystem.Filesystem/Stat", json={"path": path},
                headers={"Content-Type": "application/json"})


def test_headers_become_the_map_every_api_shows(daemon, sandbox):
    r = upload(daemon, sandbox, "wire/a.txt", b"abc",
               {"X-Metadata-Owner": "Ann", "x-metadata-stage": "draft 2", "X-Metadata-": "ignored"})
    assert r.status_code == 200, r.text
    assert r.json() == [{"name": "a.txt", "type": "file", "path": "/home/user/wire/a.txt",
                         "metadata": {"owner": "Ann", "stage": "draft 2"}}]
    r = stat(daemon, sandbox, "wire/a.txt")
    assert r.status_code == 200 and r.json()["entry"]["metadata"] == {"owner": "Ann", "stage": "draft 2"}
    native = daemon.client()
    sid = sandbox["sandboxID"]
    st = native.get(f"v1/sandboxes/{sid}/files/stat", params={"path": "wire/a.txt"}).json()
    assert st["metadata"] == {"owner": "Ann", "stage": "draft 2"}, st
    listed = native.get(f"v1/sandboxes/{sid}/files/list", params={"path": "wire"}).json()
    entries = listed["entries"] if isinstance(listed, dict) else listed
    assert [e.get("metadata") for e in entries] == [{"owner": "Ann", "stage": "draft 2"}], listed
    # a directory without metadata, and a plain upload, carry no map at all
    assert "metadata" not in stat(daemon, sandbox, "wire").json()["entry"]
    assert upload(daemon, sandbox, "wire/b.txt", b"b", {}).json()[0].keys() == {"name", "type", "path"}


@pytest.mark.parametrize("headers, words", [
    ({"X-Metadata-k": "caf\u00e9"}, "not printable ASCII"),
    ({"X-Metadata-" + "k" * 247: "v"}, "is 247 bytes; keys are at most 246"),
    ({f"X-Metadata-key{i}": "v" * 1000 for i in range(5)}, "a file holds at most 4096"),
])
def test_a_refused_set_is_400_and_writes_nothing(daemon, sandbox, headers, words):
    r = upload(daemon, sandbox, "wire/refused.txt", b"never written", headers)
    assert r.status_code == 400, r.text
    body = r.json()
    assert body["code"] == 400 and body["message"].startswith("invalid metadata: ") and words in body["message"], body
    assert stat(daemon, sandbox, "wire/refused.txt").json()["code"] == "not_found"


def test_metadata_set_inside_the_sandbox_shows(daemon, sandbox):
    """A sandboxed program may set user.e2b.* attributes itself (as in E2B, with setfattr): they
    show; a value that is not UTF-8 is left out rather than breaking the answer."""
    assert upload(daemon, sandbox, "inside.txt", b"x", {"X-Metadata-from": "upload"}).status_code == 200
    code = ("import os\n"
            "os.setxattr('/workspace/inside.txt', 'user.e2b.set-inside', b'by the cell')\n"
            "os.setxattr('/workspace/inside.txt', 'user.e2b.binary', b'\\xff\\xfe')\n"
            "os.setxattr('/workspace/inside.txt', 'user.other', b'not ours')\n"
            "sorted(os.listxattr('/workspace/inside.txt'))")
    r = daemon.client().post(f"v1/sandboxes/{sandbox['sandboxID']}/execute", json={"code": code})
    assert r.status_code == 200, r.text
    assert "user.e2b.set-inside" in r.text and "error" not in r.text, r.text
    r = stat(daemon, sandbox, "inside.txt")
    assert r.json()["entry"]["metadata"] == {"from": "upload", "set-inside": "by the cell"}, r.json()


def test_the_first_of_a_repeated_key_wins(daemon, sandbox):
    """Two headers naming one key (in any case): the first is kept, as envd keeps it."""
    origin = urlsplit(daemon.origin)
    connection = http.client.HTTPConnection(origin.hostname, origin.port, timeout=60)
    try:
        connection.putrequest("POST", "/files?path=wire/repeated.txt")
        for name, value in (("E2b-Sandbox-Id", sandbox["sandboxID"]), ("E2b-Sandbox-Port", ENVD_PORT),
                            ("X-Access-Token", sandbox["envdAccessToken"]),
                            ("Content-Type", "application/octet-stream"), ("Content-Length", "1"),
                            ("X-Metadata-Owner", "first"), ("x-metadata-owner", "second")):
            connection.putheader(name, value)
        connection.endheaders(b"x")
        response = connection.getresponse()
        assert response.status == 200
        assert json.loads(response.read())[0]["metadata"] == {"owner": "first"}
    finally:
        connection.close()


@pytest.fixture
def host_file():
    """A host file with metadata of its own, which links planted in a sandbox point at."""
    with tempfile.TemporaryDirectory(prefix="cellbox-metadata-host-") as directory:
        path = os.path.join(directory, "tagged.txt")
        with open(path, "w") as f:
            f.write("host file\n")
        os.setxattr(path, "user.e2b.owner", b"host")
        yield path


def test_links_planted_towards_a_host_file_never_reach_it(daemon, sandbox, host_file):
    """A sandboxed program links to a host file (absolutely, and with enough '..' to climb out):
    Stat and ListDir show the links without the host file's metadata, and metadata written
    through them lands inside the sandbox; the host file keeps its bytes and attributes."""
    # the link's target directory made inside the sandbox too, so a write through it lands there
    code = ("import os\n"
            f"os.makedirs(os.path.dirname({host_file!r}))\n"
            f"os.symlink({host_file!r}, '/workspace/plant-absolute')\n"
            f"os.symlink('../../../../../..' + {host_file!r}, '/workspace/plant-relative')\n"
            "'planted'")
    r = daemon.client().post(f"v1/sandboxes/{sandbox['sandboxID']}/execute", json={"code": code})
    assert r.status_code == 200 and "planted" in r.text and '"error"' not in r.text, r.text
    for name in ("plant-absolute", "plant-relative"):
        entry = stat(daemon, sandbox, name).json()["entry"]
        assert entry["type"] == "FILE_TYPE_SYMLINK" and "metadata" not in entry, entry
    listed = into_envd(daemon, sandbox, "POST", "/filesystem.Filesystem/ListDir", json={"path": "/workspace"},
                  headers={"Content-Type": "application/json"}).json()["entries"]
    assert all("metadata" not in e for e in listed if e["name"].startswith("plant-")), listed
    r = upload(daemon, sandbox, "plant-absolute", b"through the link", {"X-Metadata-owner": "sandbox"})
    assert r.status_code == 200, r.text
    assert r.json()[0]["metadata"] == {"owner": "sandbox"}
    inside = stat(daemon, sandbox, host_file).json()["entry"]
    assert inside["type"] == "FILE_TYPE_FILE" and inside["metadata"] == {"owner": "sandbox"}, inside
    # the host file is as it was, and so is the daemon
    with open(host_file) as f:
        assert f.read() == "host file\n"
    assert os.listxattr(host_file) == ["user.e2b.owner"]
    assert os.getxattr(host_file, "user.e2b.owner") == b"host"
    assert api(daemon, "GET", f"/sandboxes/{sandbox['sandboxID']}").status_code == 200


def test_v1_put_takes_the_same_headers(daemon, sandbox):
    """/v1's PUT replaces a file's metadata as envd's POST does; its entries show it."""
    native = daemon.client()
    files = f"v1/sandboxes/{sandbox['sandboxID']}/files"
    r = native.put(files, params={"path": "v1/tagged.txt"}, data=b"one",
                   headers={"X-Metadata-Owner": "ann", "X-Metadata-Stage": "draft"})
    assert r.status_code == 201 and r.json()["metadata"] == {"owner": "ann", "stage": "draft"}, r.text
    assert stat(daemon, sandbox, "v1/tagged.txt").json()["entry"]["metadata"] == {"owner": "ann", "stage": "draft"}
    r = native.put(files, params={"path": "v1/tagged.txt"}, data=b"two", headers={"X-Metadata-Owner": "bob"})
    assert r.status_code == 200 and r.json()["metadata"] == {"owner": "bob"}, r.text
    r = native.put(files, params={"path": "v1/tagged.txt"}, data=b"three")
    assert r.status_code == 200 and "metadata" not in r.json(), r.text
    r = native.put(files, params={"path": "v1/refused.txt"}, data=b"x", headers={"X-Metadata-" + "k" * 300: "v"})
    assert r.status_code == 400 and "is 300 bytes; keys are at most 246" in r.json()["message"], r.text
    assert native.get(f"{files}/stat", params={"path": "v1/refused.txt"}).status_code == 404
