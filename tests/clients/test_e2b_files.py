"""envd's files through E2B's official SDK (npm `e2b`) and on the wire, against a daemon whose
sandboxes have a 64 MiB disk.

- The SDK (tests/clients/node/e2b_files.mjs): a 40 MiB file written as a stream and as a form
  and read back (hashes compared), several files in one form, writes past the disk limit
  (NotEnoughSpaceError, nothing left), gzip both ways, signed upload/download URLs fetched with
  plain fetch() and no token (valid, without expiry, wrong, for another path, expired, unsigned,
  another sandbox's). Every step is checked here again.
- On the wire: a corrupt gzip body (400, no file), gzip on the way out only when asked, a form
  sent in small pieces (boundaries split across reads), a form cut short (400, no partial
  file), each sandbox's envd access token admitting calls into that sandbox only, and the
  daemon's token still admitting every call."""
import gzip
import hashlib
import os

import pytest
import requests

from helpers.daemon import Daemon, serve
from helpers.e2b import ENVD_PORT, api, into_envd
from helpers.node_clients import assert_every_step_passed, run_e2b_script

pytestmark = pytest.mark.cellbox_only  # Jupyter Server has no E2B API

TIMEOUT = 240
MiB = 1 << 20


@pytest.fixture(scope="module")
def small_disk_daemon():
    yield from serve(Daemon(args=["--disk-limit", "64M"]).start())


def test_sdk_files(small_disk_daemon):
    proc, steps, detail = run_e2b_script(small_disk_daemon, "e2b_files.mjs", TIMEOUT)
    expected = ["create", "big_stream", "big_form", "multipart", "disk_full", "gzip", "signed_urls", "kill"]
    assert_every_step_passed(proc, steps, detail, expected)

    assert steps["create"]["token_differs"], "each sandbox has its own envd access token"
    big = steps["big_stream"]
    assert big["size"] == 40 * MiB and big["same_hash"]
    assert big["written"] == {"name": "big.bin", "type": "file", "path": "/home/user/big.bin"}
    assert steps["big_form"]["same_hash"]

    many = steps["multipart"]
    assert [w["path"] for w in many["written"]] == [
        "/home/user/many/a.txt", "/home/user/many/deeper/b.bin", "/home/user/many/empty.txt"]
    assert many["a"] == "alpha" and many["b_same"] and many["empty_length"] == 0

    full = steps["disk_full"]
    for way in ("form", "stream"):
        assert full[way]["name"] == "NotEnoughSpaceError", full
        assert "64 MiB" in full[way]["message"] and "disk" in full[way]["message"], full
    assert full["left"] == [False, False], "a failed write leaves no partial file"
    assert full["after_path"] == "/home/user/after.txt", "the sandbox still takes files"

    zipped = steps["gzip"]
    assert zipped["plain_same"] and zipped["zipped_same"] and zipped["bytes_same"]

    signed = steps["signed_urls"]
    assert signed["valid"] == {"status": 200, "body": "hello world"}
    assert signed["forever"] == {"status": 200, "body": "hello world"}
    assert signed["uploaded"] == {"status": 200, "body": [
        {"name": "up.txt", "type": "file", "path": "/home/user/signed/up.txt"}]}
    assert signed["read_back"] == "uploaded without a token"
    for refused in ("wrong", "moved"):
        assert signed[refused]["status"] == 401 and signed[refused]["body"]["code"] == 401
        assert "invalid signature" in signed[refused]["body"]["message"]
    for late in ("expired", "expired_upload"):
        assert signed[late]["status"] == 401
        # E2B's own words first, then when
        assert signed[late]["body"]["message"].startswith("signature is already expired (at ")
    assert signed["late_exists"] is False, "an expired upload URL writes nothing"
    assert signed["bare_status"] == 401, "no signature and no token: refused"
    assert signed["theirs_status"] == 404, "another sandbox's signature reaches that sandbox only"


# ---- on the wire ----

@pytest.fixture
def two_sandboxes(small_disk_daemon):
    made = []
    for _ in range(2):
        r = api(small_disk_daemon, "POST", "/v2/sandboxes", json={"templateID": "base", "timeout": 120})
        assert r.status_code == 201, r.text
        made.append(r.json())
    yield made
    for s in made:
        api(small_disk_daemon, "DELETE", f"/sandboxes/{s['sandboxID']}")


def read_back(daemon, sandbox, path):
    return into_envd(daemon, sandbox, "GET", "/files", params={"path": path})


def test_corrupt_gzip_is_400_and_leaves_no_file(small_disk_daemon, two_sandboxes):
    d, s = small_disk_daemon, two_sandboxes[0]
    good = gzip.compress(b"x" * 100_000)
    corrupt = good[:40] + bytes(b ^ 0x5A for b in good[40:60]) + good[60:]
    for body in (corrupt, good[:-8], b"not gzip at all"):  # damaged, cut short, not gzip
        r = into_envd(d, s, "POST", "/files", params={"path": "bad.txt"}, data=body,
                 headers={"Content-Type": "application/octet-stream", "Content-Encoding": "gzip"})
        assert r.status_code == 400, r.text
        assert r.json()["code"] == 400 and "not a valid gzip stream" in r.json()["message"]
        assert read_back(d, s, "bad.txt").status_code == 404, "no partial file"


def test_gzip_download_only_when_asked(small_disk_daemon, two_sandboxes):
    d, s = small_disk_daemon, two_sandboxes[0]
    content = b"compress me\n" * 50_000
    assert into_envd(d, s, "POST", "/files", params={"path": "z.txt"}, data=content,
                headers={"Content-Type": "application/octet-stream"}).status_code == 200
    r = requests.get(d.origin + "/files", params={"path": "z.txt"}, stream=True, timeout=60,
                     headers={"E2b-Sandbox-Id": s["sandboxID"], "E2b-Sandbox-Port": ENVD_PORT,
                              "X-Access-Token": s["envdAccessToken"], "Accept-Encoding": "gzip"})
    raw = r.raw.read(decode_content=False)
    assert r.status_code == 200 and r.headers["Content-Encoding"] == "gzip"
    assert len(raw) < len(content) // 10 and gzip.decompress(raw) == content
    r = requests.get(d.origin + "/files", params={"path": "z.txt"}, stream=True, timeout=60,
                     headers={"E2b-Sandbox-Id": s["sandboxID"], "E2b-Sandbox-Port": ENVD_PORT,
                              "X-Access-Token": s["envdAccessToken"], "Accept-Encoding": "identity"})
    assert "Content-Encoding" not in r.headers and r.raw.read(decode_content=False) == content


def form_body(boundary, parts):
    body = b""
    for filename, content in parts:
        body += (f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; "
                 f"filename=\"{filename}\"\r\nContent-Type: application/octet-stream\r\n\r\n").encode()
        body += content + b"\r\n"
    return body + f"--{boundary}--\r\n".encode()


def test_form_split_across_small_reads(small_disk_daemon, two_sandboxes):
    """Parts and their boundaries arrive cut at every few bytes (chunked, 7 bytes a chunk)."""
    d, s = small_disk_daemon, two_sandboxes[0]
    boundary = "cellbox-boundary-42"
    # content that holds most of a boundary, and CR LF, without being one
    tricky = b"--cellbox-boundary-4\r\n--cellbox-boundary\r\n" * 100
    parts = [("split/one.bin", tricky), ("split/two.bin", os.urandom(70_000)), ("split/three.txt", b"3")]
    body = form_body(boundary, parts)
    pieces = (body[i:i + 7] for i in range(0, len(body), 7))
    r = into_envd(d, s, "POST", "/files", data=pieces,
             headers={"Content-Type": f"multipart/form-data; boundary={boundary}"})
    assert r.status_code == 200, r.text
    assert [e["path"] for e in r.json()] == ["/home/user/" + p for p, _ in parts]
    for path, content in parts:
        got = read_back(d, s, path)
        assert got.status_code == 200 and hashlib.sha256(got.content).digest() == hashlib.sha256(content).digest()


def test_form_cut_short_leaves_no_partial_file(small_disk_daemon, two_sandboxes):
    d, s = small_disk_daemon, two_sandboxes[0]
    boundary = "cut-here"
    body = form_body(boundary, [("cut/whole.txt", b"complete"), ("cut/half.bin", os.urandom(200_000))])
    truncated = body[:-100_000]  # the second part never ends
    r = into_envd(d, s, "POST", "/files", data=truncated,
             headers={"Content-Type": f"multipart/form-data; boundary={boundary}"})
    assert r.status_code == 400, r.text
    assert "closing boundary" in r.json()["message"]
    assert read_back(d, s, "cut/half.bin").status_code == 404, "no partial file"


def test_envd_access_tokens_are_per_sandbox(small_disk_daemon, two_sandboxes):
    d = small_disk_daemon
    a, b = two_sandboxes
    assert a["envdAccessToken"] != b["envdAccessToken"]
    assert a["envdAccessToken"] != d.token and d.token not in a["envdAccessToken"]
    assert into_envd(d, a, "POST", "/files", params={"path": "mine.txt"}, data=b"a's",
                headers={"Content-Type": "application/octet-stream"}).status_code == 200
    # b's token does not open a: read, write, Connect-RPC
    r = into_envd(d, a, "GET", "/files", token=b["envdAccessToken"], params={"path": "mine.txt"})
    assert r.status_code == 401
    r = into_envd(d, a, "POST", "/files", token=b["envdAccessToken"], params={"path": "planted.txt"},
             data=b"b's", headers={"Content-Type": "application/octet-stream"})
    assert r.status_code == 401
    r = into_envd(d, a, "POST", "/filesystem.Filesystem/Stat", token=b["envdAccessToken"],
             json={"path": "mine.txt"})
    assert r.status_code == 401
    assert read_back(d, a, "planted.txt").status_code == 404, "nothing was written into a"
    assert read_back(d, a, "mine.txt").content == b"a's"
    # nor the control plane, nor /v1
    assert requests.get(d.origin + "/v2/sandboxes", headers={"X-API-Key": a["envdAccessToken"]},
                        timeout=30).status_code == 401
    assert requests.get(d.origin + "/v1/sandboxes", headers={"Authorization": f"token {a['envdAccessToken']}"},
                        timeout=30).status_code == 401
    # the daemon's token still opens every sandbox
    r = into_envd(d, a, "GET", "/files", token=d.token, params={"path": "mine.txt"})
    assert r.status_code == 200 and r.content == b"a's"
    # a signature made with a's token but sent naming b does not reach a
    r = into_envd(d, b, "GET", "/files", token=d.token, params={"path": "mine.txt", "signature": "v1_x"})
    assert r.status_code == 401
