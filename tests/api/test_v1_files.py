"""/v1 files: read/write (streamed), stat, list, mkdir, move, remove, batch, tar; confinement
(.., symlinks that point out, /proc /sys /dev) and the disk limit (507, 413)."""
import base64
import hashlib
import io
import os
import tarfile
import uuid

import pytest

from helpers import rawhttp
from helpers.asserts import assert_v1_error, expect

MIB = 1 << 20


def ready(v1, m):
    """Wait until the sandbox has started (an execution waits for its kernel), so that the
    tests below check what they name; test_files_right_after_create checks the start itself."""
    v1.execute(m["id"], "1", timeout=120)
    return m


@pytest.fixture(scope="module")
def box(v1):
    m = ready(v1, v1.create(timeout_s=0))
    yield m
    v1.remove(m["id"])


def url(box, sub=""):
    return f"v1/sandboxes/{box['id']}/files" + (f"/{sub}" if sub else "")


def stat(v1, box, path):
    return v1.get(url(box, "stat"), params={"path": path})


def check_entry(e, path, typ):
    assert e["path"] == path, e
    assert e["name"] == os.path.basename(path), e
    assert e["type"] == typ, e
    assert type(e["size"]) is int and e["size"] >= 0, e
    assert isinstance(e["mode"], str) and e["mode"].isdigit() and e["mode"].startswith("0"), e
    assert isinstance(e["modified_at"], str) and e["modified_at"][:2] == "20", e
    assert type(e["uid"]) is int and type(e["gid"]) is int, e


def test_files_right_after_create(v1):
    """A sandbox is usable as soon as POST /v1/sandboxes has answered 201 (the contract has no
    "starting" state; 409 is for paused and dead sandboxes only)."""
    for _ in range(3):
        m = v1.create(timeout_s=0)
        r = v1.put(f"v1/sandboxes/{m['id']}/files", params={"path": "first.txt"}, data=b"1")
        assert r.status_code == 201, r.text
        assert v1.get(f"v1/sandboxes/{m['id']}/files/list", params={"path": "/workspace"}).status_code == 200
        v1.remove(m["id"])


def test_write_read(v1, box):
    sid = box["id"]
    r = v1.put(url(box), params={"path": "hello.txt"}, data=b"hello")
    assert r.status_code == 201, r.text
    check_entry(r.json(), "/workspace/hello.txt", "file")
    assert r.json()["size"] == 5
    assert r.json()["mode"] == "0644", r.json()
    r = v1.put(url(box), params={"path": "/workspace/hello.txt"}, data=b"hello again")
    assert r.status_code == 200, r.text
    assert r.json()["size"] == 11
    r = expect(v1.get(url(box), params={"path": "hello.txt"}), 200)
    assert r.content == b"hello again"
    assert r.headers["Content-Type"].startswith("application/octet-stream")
    # the sandbox sees it, owned by the sandbox user
    assert v1.value(sid, "import os\n(open('/workspace/hello.txt').read(), os.stat('/workspace/hello.txt').st_uid == os.getuid())") \
        == "('hello again', True)"
    # every byte value survives; files written in the sandbox are readable
    blob = bytes(range(256)) * 64
    v1.write(sid, "bin/all.bin", blob)
    assert v1.read(sid, "bin/all.bin") == blob
    v1.execute(sid, "open('/tmp/made_inside', 'wb').write(b'\\x00inside\\xff')")
    assert v1.read(sid, "/tmp/made_inside") == b"\x00inside\xff"
    # an empty file
    assert v1.write(sid, "empty", b"")["size"] == 0
    assert v1.read(sid, "empty") == b""


def test_read_errors(v1, box):
    assert_v1_error(v1.get(url(box), params={"path": "no/such/file"}), 404)
    v1.write(box["id"], "adir/f", b"x")
    assert_v1_error(v1.get(url(box), params={"path": "adir"}), 400, "director")
    assert_v1_error(v1.get(url(box)), 400, "path")  # path is required
    assert_v1_error(v1.get(f"v1/sandboxes/{uuid.uuid4()}/files", params={"path": "x"}), 404, "does not exist")


def test_parents_created(v1, box):
    r = v1.put(url(box), params={"path": "p1/p2/p3/leaf.txt"}, data=b"leaf")
    assert r.status_code == 201, r.text
    check_entry(r.json(), "/workspace/p1/p2/p3/leaf.txt", "file")
    check_entry(expect(stat(v1, box, "p1/p2"), 200).json(), "/workspace/p1/p2", "dir")


def test_large_file_streamed(v1, box):
    data = os.urandom(50 * MIB)
    digest = hashlib.sha256(data).hexdigest()
    r = v1.put(url(box), params={"path": "big.bin"}, data=data, timeout=120)
    assert r.status_code == 201, r.text[:300]
    assert r.json()["size"] == len(data)
    del data
    r = v1.get(url(box), params={"path": "big.bin"}, stream=True, timeout=120)
    assert r.status_code == 200
    h = hashlib.sha256()
    n = 0
    for chunk in r.iter_content(1 << 20):
        h.update(chunk)
        n += len(chunk)
    assert n == 50 * MIB and h.hexdigest() == digest
    assert v1.value(box["id"], "import hashlib\nhashlib.sha256(open('/workspace/big.bin','rb').read()).hexdigest()") \
        == repr(digest)
    expect(v1.delete(url(box), params={"path": "big.bin"}), 204)


def test_list_with_depth(v1, box):
    sid = box["id"]
    for p in ("tree/a.txt", "tree/sub/b.txt", "tree/sub/deep/c.txt", "tree/sub/deep/deeper/d.txt"):
        v1.write(sid, p, p.encode())
    base = "/workspace/tree"

    def listing(depth=None):
        params = {"path": "tree"}
        if depth is not None:
            params["depth"] = depth
        r = expect(v1.get(url(box, "list"), params=params), 200)
        return r.json()

    one = listing()
    assert [e["path"] for e in one] == [f"{base}/a.txt", f"{base}/sub"], one
    assert [e["type"] for e in one] == ["file", "dir"]
    assert one[0]["size"] == len("tree/a.txt")
    assert listing(1) == one
    two = [e["path"] for e in listing(2)]
    assert two == sorted(two)
    assert set(two) == {f"{base}/a.txt", f"{base}/sub", f"{base}/sub/b.txt", f"{base}/sub/deep"}, two
    everything = [e["path"] for e in listing(10)]
    assert f"{base}/sub/deep/deeper/d.txt" in everything and everything == sorted(everything)
    assert len(everything) == 7, everything
    assert_v1_error(v1.get(url(box, "list"), params={"path": "tree", "depth": 0}), 400, "depth")
    assert_v1_error(v1.get(url(box, "list"), params={"path": "tree", "depth": 11}), 400, "depth")
    assert_v1_error(v1.get(url(box, "list"), params={"path": "tree", "depth": "x"}), 400, "depth")
    assert_v1_error(v1.get(url(box, "list"), params={"path": "tree/a.txt"}), 400)
    assert_v1_error(v1.get(url(box, "list"), params={"path": "no-such-dir"}), 404)


def test_stat(v1, box):
    sid = box["id"]
    v1.write(sid, "st/file.txt", b"12345")
    v1.execute(sid, "import os\nos.symlink('file.txt', '/workspace/st/link')")
    check_entry(expect(stat(v1, box, "st/file.txt"), 200).json(), "/workspace/st/file.txt", "file")
    d = expect(stat(v1, box, "/workspace/st"), 200).json()
    check_entry(d, "/workspace/st", "dir")
    link = expect(stat(v1, box, "st/link"), 200).json()
    check_entry(link, "/workspace/st/link", "symlink")
    assert link["symlink_target"] == "file.txt"
    assert "symlink_target" not in d or d["symlink_target"] in (None, "")
    assert_v1_error(stat(v1, box, "st/missing"), 404)


def test_mkdir(v1, box):
    r = v1.post(url(box, "mkdir"), json={"path": "m1/m2/m3"})
    assert r.status_code == 201, r.text
    check_entry(r.json(), "/workspace/m1/m2/m3", "dir")
    assert v1.post(url(box, "mkdir"), json={"path": "/workspace/m1/m2/m3"}).status_code == 200
    v1.write(box["id"], "m1/afile", b"x")
    assert_v1_error(v1.post(url(box, "mkdir"), json={"path": "m1/afile"}), 409)
    assert_v1_error(v1.post(url(box, "mkdir"), json={"path": "m1/afile/below"}), 409)
    assert_v1_error(v1.post(url(box, "mkdir"), json={}), 400, "path")
    assert_v1_error(v1.post(url(box, "mkdir"), json={"path": "x", "parents": True}), 400, "parents")


def test_move(v1, box):
    sid = box["id"]
    v1.write(sid, "mv/src.txt", b"moving")
    r = expect(v1.post(url(box, "move"), json={"from": "mv/src.txt", "to": "mv/dst.txt"}), 200)
    check_entry(r.json(), "/workspace/mv/dst.txt", "file")
    assert v1.read(sid, "mv/dst.txt") == b"moving"
    assert_v1_error(stat(v1, box, "mv/src.txt"), 404)
    # a directory, to an absolute path
    expect(v1.post(url(box, "move"), json={"from": "mv", "to": "/workspace/mv2"}), 200)
    assert v1.read(sid, "mv2/dst.txt") == b"moving"
    assert_v1_error(v1.post(url(box, "move"), json={"from": "mv/none", "to": "x"}), 404)
    assert_v1_error(v1.post(url(box, "move"), json={"from": "mv2"}), 400, "to")


def test_remove(v1, box):
    sid = box["id"]
    v1.write(sid, "rm/one.txt", b"1")
    v1.write(sid, "rm/sub/two.txt", b"2")
    r = v1.delete(url(box), params={"path": "rm/one.txt"})
    assert r.status_code == 204 and not r.content
    assert_v1_error(stat(v1, box, "rm/one.txt"), 404)
    assert_v1_error(v1.delete(url(box), params={"path": "rm"}), 409)
    assert v1.read(sid, "rm/sub/two.txt") == b"2"
    expect(v1.delete(url(box), params={"path": "rm", "recursive": "true"}), 204)
    assert_v1_error(stat(v1, box, "rm"), 404)
    assert_v1_error(v1.delete(url(box), params={"path": "rm"}), 404)
    # an empty directory goes without recursive
    expect(v1.post(url(box, "mkdir"), json={"path": "rm-empty"}), 201)
    expect(v1.delete(url(box), params={"path": "rm-empty"}), 204)


def test_batch(v1, box):
    sid = box["id"]
    raw = bytes(range(256))
    body = {"files": [
        {"path": "batch/a.txt", "content": "alpha"},
        {"path": "/workspace/batch/deep/b.bin", "content": base64.b64encode(raw).decode(), "encoding": "base64"},
        {"path": "batch/c.txt", "content": "gamma ü", "encoding": "utf-8"},
    ]}
    r = expect(v1.post(url(box, "batch"), json=body), 200)
    entries = r.json()
    assert [e["path"] for e in entries] == ["/workspace/batch/a.txt", "/workspace/batch/deep/b.bin",
                                            "/workspace/batch/c.txt"], entries
    assert [e["size"] for e in entries] == [5, 256, len("gamma ü".encode())]
    assert v1.read(sid, "batch/a.txt") == b"alpha"
    assert v1.read(sid, "batch/deep/b.bin") == raw
    assert v1.read(sid, "batch/c.txt") == "gamma ü".encode()
    assert_v1_error(v1.post(url(box, "batch"), json={"files": [{"path": "x", "content": "!!", "encoding": "base64"}]}),
                 400)
    assert_v1_error(v1.post(url(box, "batch"), json={"files": [{"path": "x", "content": "a", "encoding": "rot13"}]}),
                 400, "encoding")
    assert_v1_error(v1.post(url(box, "batch"), json={"files": [{"content": "a"}]}), 400, "path")
    assert_v1_error(v1.post(url(box, "batch"), json={"files": [{"path": "../x", "content": "a"}]}), 400)


def make_tar(members):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, kind, payload in members:
            info = tarfile.TarInfo(name)
            if kind == "dir":
                info.type = tarfile.DIRTYPE
                info.mode = 0o755
                tar.addfile(info)
            elif kind == "link":
                info.type = tarfile.SYMTYPE
                info.linkname = payload
                tar.addfile(info)
            else:
                info.size = len(payload)
                info.mode = 0o755 if name.endswith(".sh") else 0o644
                tar.addfile(info, io.BytesIO(payload))
    return buf.getvalue()


def tar_files(data):
    """{relative name: bytes or ('link', target) or 'dir'} of a tar, names without './'."""
    out = {}
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        for m in tar.getmembers():
            name = m.name
            while name.startswith("./"):
                name = name[2:]
            name = name.rstrip("/")
            if not name or name == ".":
                continue
            if m.isdir():
                out[name] = "dir"
            elif m.issym():
                out[name] = ("link", m.linkname)
            elif m.isfile():
                out[name] = tar.extractfile(m).read()
    return out


TREE = [
    ("README.md", "file", b"# project\n"),
    ("src", "dir", None),
    ("src/main.py", "file", b"print('main')\n"),
    ("src/pkg", "dir", None),
    ("src/pkg/__init__.py", "file", b""),
    ("empty", "dir", None),
    ("bin", "dir", None),
    ("bin/run.sh", "file", b"#!/bin/sh\necho run\n"),
    ("readme-link", "link", "README.md"),
    ("data.bin", "file", os.urandom(100_000)),
]


def test_tar_round_trip(v1, box):
    sid = box["id"]
    r = v1.put(url(box, "tar"), params={"path": "unpacked"}, data=make_tar(TREE),
               headers={"Content-Type": "application/x-tar"})
    assert r.status_code == 200, r.text
    check_entry(r.json(), "/workspace/unpacked", "dir")
    for name, kind, payload in TREE:
        if kind == "file":
            assert v1.read(sid, f"unpacked/{name}") == payload, name
    assert expect(stat(v1, box, "unpacked/empty"), 200).json()["type"] == "dir"
    assert expect(stat(v1, box, "unpacked/readme-link"), 200).json()["symlink_target"] == "README.md"
    assert v1.value(sid, "import os\nos.access('/workspace/unpacked/bin/run.sh', os.X_OK)") == "True"
    assert v1.value(sid, "import os\nos.stat('/workspace/unpacked/src/main.py').st_uid == os.getuid()") == "True"

    r = expect(v1.get(url(box, "tar"), params={"path": "unpacked"}), 200)
    assert r.headers["Content-Type"].startswith("application/x-tar")
    got = tar_files(r.content)
    want = {name: ("dir" if kind == "dir" else ("link", payload) if kind == "link" else payload)
            for name, kind, payload in TREE}
    assert got == want, sorted(got)
    # and back in, somewhere else: the same tree
    expect(v1.put(url(box, "tar"), params={"path": "/workspace/again"}, data=r.content), 200)
    a = [e["path"][len("/workspace/unpacked"):] for e in
         expect(v1.get(url(box, "list"), params={"path": "unpacked", "depth": 10}), 200).json()]
    b = [e["path"][len("/workspace/again"):] for e in
         expect(v1.get(url(box, "list"), params={"path": "again", "depth": 10}), 200).json()]
    assert a == b and len(a) == len(TREE)


def test_tar_errors(v1, box):
    assert_v1_error(v1.put(url(box, "tar"), params={"path": "junk"}, data=b"this is not a tar archive" * 40), 400)
    assert_v1_error(v1.get(url(box, "tar"), params={"path": "no-such-dir"}), 404)


def test_dotdot_refused(v1, box):
    for p in ("../etc/passwd", "/workspace/../etc/passwd", "a/../../b", ".."):
        assert_v1_error(v1.get(url(box), params={"path": p}), 400, "..")
        assert_v1_error(v1.put(url(box), params={"path": p}, data=b"x"), 400)
    assert_v1_error(stat(v1, box, "../.."), 400)
    assert_v1_error(v1.post(url(box, "move"), json={"from": "hello.txt", "to": "../../escaped"}), 400)
    assert_v1_error(v1.post(url(box, "mkdir"), json={"path": "../up"}), 400)


def test_pseudo_filesystems_refused(v1, box):
    for p in ("/proc/self/environ", "/proc/1/status", "/sys/kernel/hostname", "/dev/null", "/dev/shm/x"):
        assert_v1_error(v1.get(url(box), params={"path": p}), 403)
    assert_v1_error(v1.put(url(box), params={"path": "/dev/newfile"}, data=b"x"), 403)
    assert_v1_error(v1.get(url(box, "list"), params={"path": "/proc"}), 403)
    assert_v1_error(stat(v1, box, "/sys"), 403)
    # read-only places
    assert_v1_error(v1.put(url(box), params={"path": "/usr/bin/planted"}, data=b"x"), 403)
    assert not os.path.exists("/usr/bin/planted")


def test_symlinks_never_reach_the_host(v1, box, daemon):
    sid = box["id"]
    secret_path = os.path.join(daemon.tmp, f"host-secret-{uuid.uuid4().hex}.txt")
    secret = f"HOST-SECRET-{uuid.uuid4().hex}".encode()
    with open(secret_path, "wb") as f:
        f.write(secret)
    with open("/etc/shadow", "rb") as f:
        shadow = f.read()
    up = "../" * 12
    links = {
        "ln-shadow": "/etc/shadow",
        "ln-proc-root": "/proc/1/root/etc/shadow",
        "ln-proc-root-secret": "/proc/1/root" + secret_path,
        "ln-self-root": "/proc/self/root" + secret_path,
        "ln-abs-secret": secret_path,
        "ln-up-secret": up.rstrip("/") + secret_path,
        "ln-up": up.rstrip("/"),
        "ln-proc": "/proc",
    }
    code = "import os\n" + "".join(f"os.symlink({t!r}, '/workspace/links/{n}')\n" for n, t in links.items())
    ev = v1.execute(sid, "os_ = __import__('os'); os_.makedirs('/workspace/links', exist_ok=True)\n" + code)
    assert not ev.errors, ev.errors

    def never_host(r, what):
        if r.status_code == 200:
            assert secret not in r.content, f"{what} gave the host's secret file"
            assert r.content != shadow, f"{what} gave the host's /etc/shadow"
        else:
            assert r.status_code in (400, 403, 404), f"{what} -> {r.status_code} {r.text[:200]}"
            assert r.headers["Content-Type"].startswith("application/json")

    for name in links:
        never_host(v1.get(url(box), params={"path": f"links/{name}"}), f"GET links/{name}")
    never_host(v1.get(url(box), params={"path": "links/ln-up" + secret_path}), "GET through ln-up")
    never_host(v1.get(url(box), params={"path": "links/ln-proc/1/root/etc/shadow"}), "GET through ln-proc")
    never_host(v1.get(url(box, "tar"), params={"path": "links/ln-up" + os.path.dirname(secret_path)}),
               "tar through ln-up")
    # listing through a link that points up stays inside the sandbox
    r = v1.get(url(box, "list"), params={"path": "links/ln-up" + os.path.dirname(secret_path)})
    if r.status_code == 200:
        assert os.path.basename(secret_path) not in r.text
    # writing through links never touches the host
    planted = os.path.join(daemon.tmp, f"planted-{uuid.uuid4().hex}")
    v1.execute(sid, f"import os\nos.symlink({planted!r}, '/workspace/links/ln-plant')")
    for p in ("links/ln-plant", "links/ln-up" + planted):
        r = v1.put(url(box), params={"path": p}, data=b"planted")
        assert r.status_code in (200, 201, 400, 403, 404), r.text
    r = v1.post(url(box, "batch"), json={"files": [{"path": "links/ln-plant", "content": "b"}]})
    assert r.status_code in (200, 400, 403, 404), r.text
    assert not os.path.exists(planted), "a write through a symlink reached the host"
    with open(secret_path, "rb") as f:
        assert f.read() == secret
    # a link to /etc/shadow written through: refused or confined, never the host's file
    v1.put(url(box), params={"path": "links/ln-shadow"}, data=b"overwritten")
    with open("/etc/shadow", "rb") as f:
        assert f.read() == shadow


@pytest.fixture(scope="module")
def small(v1):
    m = ready(v1, v1.create(timeout_s=0, limits={"disk": "16M"}))
    yield m
    v1.remove(m["id"])


def test_disk_full_507(v1, small, daemon):
    sid = small["id"]
    path = f"{daemon.base_url.rstrip('/')}/v1/sandboxes/{sid}/files?path=full.bin"
    answer = rawhttp.request(daemon.host, daemon.port, "PUT", path,
                             {"Authorization": f"token {daemon.token}", "Content-Type": "application/octet-stream"},
                             body_size=32 * MIB, body_byte=b"\0", chunked=True, timeout=120)
    status, headers, body = answer.status, answer.headers, answer.body
    assert status == 507, (status, body[:300])
    assert headers.get("content-type", "").startswith("application/json"), headers
    # two files that each fit, but not together
    v1.delete(f"v1/sandboxes/{sid}/files", params={"path": "full.bin"})  # a partial file, if left
    v1.write(sid, "ten-a.bin", b"a" * (10 * MIB))
    r = v1.put(f"v1/sandboxes/{sid}/files", params={"path": "ten-b.bin"}, data=b"b" * (10 * MIB), timeout=20)
    assert_v1_error(r, 507, "disk is full")
    assert "inode" not in r.json()["message"], r.text
    r = v1.post(f"v1/sandboxes/{sid}/files/batch",
                json={"files": [{"path": "batch-big.txt", "content": "c" * (10 * MIB)}]}, timeout=20)
    assert_v1_error(r, 507)
    # the sandbox still works, and space comes back
    expect(v1.delete(f"v1/sandboxes/{sid}/files", params={"path": "ten-a.bin"}), 204)
    for leftover in ("ten-b.bin", "batch-big.txt"):
        v1.delete(f"v1/sandboxes/{sid}/files", params={"path": leftover})
    v1.write(sid, "fits.bin", b"f" * (8 * MIB))
    assert v1.value(sid, "'ok'") == "'ok'"


FILL_INODES = """
import os
os.makedirs('/workspace/many', exist_ok=True)
made = 0
for i in range(200000):  # bounded: a 16M disk holds about a thousand
    try:
        open(f'/workspace/many/f{i}', 'w').close()
    except OSError as error:
        print(error.errno, made)
        break
    made += 1
"""


def test_no_free_inodes_is_not_called_a_full_disk(v1):
    """A workspace out of inodes (many small files), not out of bytes, is told apart from a full
    disk: the cell's and a command's stderr say so, and /v1's files answer 507 naming the inodes
    and what to do (MCP's and E2B's files use the same sentence, from confined.c)."""
    m = ready(v1, v1.create(timeout_s=0, limits={"disk": "16M"}))
    sid = m["id"]
    try:
        cell = v1.execute(sid, FILL_INODES)
        errno_and_count = cell.stdout.split()
        assert errno_and_count[0] == "28" and int(errno_and_count[1]) > 100, errno_and_count  # ENOSPC
        # the cell and a command that fail on it are told which limit, in the same words
        note = "[cellbox: /workspace has no free inodes: it holds "
        assert note in cell.stderr and "delete files" in cell.stderr and "disk quota" in cell.stderr, cell.stderr
        ran = v1.command(sid, "touch /workspace/another")
        assert ran[-1]["exit_code"] != 0 and note in "".join(e.get("text", "") for e in ran if e["type"] == "stderr"), ran
        r = v1.put(f"v1/sandboxes/{sid}/files", params={"path": "one-more.txt"}, data=b"x")
        assert_v1_error(r, 507, "no free inodes", "delete files", '"disk" limit')
        message = r.json()["message"]
        assert "disk is full" not in message, message
        r = v1.post(f"v1/sandboxes/{sid}/files/mkdir", json={"path": "new/dir"})
        assert_v1_error(r, 507, "no free inodes")
        assert v1.model(sid)["usage"]["disk_bytes"] < 8 * MIB  # bytes were not the limit
        # deleting files gives inodes back
        expect(v1.delete(f"v1/sandboxes/{sid}/files", params={"path": "many", "recursive": "true"}), 204)
        expect(v1.put(f"v1/sandboxes/{sid}/files", params={"path": "one-more.txt"}, data=b"x"), 201)
    finally:
        v1.remove(sid)


def test_content_length_above_disk_limit_413(v1, small, daemon):
    sid = small["id"]
    r = rawhttp.request(daemon.host, daemon.port, "PUT",
                        f"{daemon.base_url.rstrip('/')}/v1/sandboxes/{sid}/files?path=huge.bin",
                        headers={"Authorization": f"token {daemon.token}",
                                 "Content-Type": "application/octet-stream"},
                        body_size=32 * MIB, body_byte=b"h")
    assert r.status == 413, r
    assert r.headers.get("content-type", "").startswith("application/json"), r
    assert v1.get(f"v1/sandboxes/{sid}/files/stat", params={"path": "huge.bin"}).status_code == 404
