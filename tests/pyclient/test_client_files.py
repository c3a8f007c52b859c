"""sandbox.files: single files (bytes, text, file objects), batches, listing, stat, mkdir,
move, remove, and whole directories both ways through the tar routes."""
import io
import os

import pytest

import cellbox


def test_write_and_read(sandbox):
    entry = sandbox.files.write("notes/hello.txt", "héllo\n")
    assert isinstance(entry, cellbox.EntryInfo)
    assert entry.path == "/workspace/notes/hello.txt" and entry.name == "hello.txt"
    assert entry.type == "file" and entry.size == len("héllo\n".encode()) and entry.mode == "0644"
    assert sandbox.files.read("notes/hello.txt") == "héllo\n".encode()
    assert sandbox.files.read_text("/workspace/notes/hello.txt") == "héllo\n"
    # the kernel sees the same file
    assert sandbox.run_code("open('notes/hello.txt').read()").text == "'héllo\\n'"

    binary = bytes(range(256)) * 1000
    sandbox.files.write("blob.bin", binary)
    assert sandbox.files.read("blob.bin") == binary
    sandbox.files.write("blob.bin", io.BytesIO(b"replaced"))
    assert sandbox.files.read("blob.bin") == b"replaced"
    sandbox.files.write("from_bytearray.bin", bytearray(b"\x00\x01"))
    assert sandbox.files.read("from_bytearray.bin") == b"\x00\x01"
    with pytest.raises(TypeError):
        sandbox.files.write("x", 42)


def test_write_a_real_file_object(sandbox, tmp_path):
    local = tmp_path / "big.bin"
    local.write_bytes(os.urandom(3 << 20))
    with open(local, "rb") as f:
        f.read(10)  # from where the file object stands, as a stream would be
        entry = sandbox.files.write("big.bin", f)
    assert entry.size == (3 << 20) - 10
    assert sandbox.files.read("big.bin") == local.read_bytes()[10:]


def test_write_many(sandbox):
    entries = sandbox.files.write_many([("batch/a.txt", "A"), {"path": "batch/b.bin", "data": b"\xff\x00"},
                                        ("batch/deep/c.txt", b"C")])
    assert [e.path for e in entries] == ["/workspace/batch/a.txt", "/workspace/batch/b.bin",
                                         "/workspace/batch/deep/c.txt"]
    assert sandbox.files.read("batch/b.bin") == b"\xff\x00"
    sandbox.files.write_many({"batch/d.txt": "D"})
    assert sandbox.files.read_text("batch/d.txt") == "D"


def test_list_stat_exists(sandbox):
    sandbox.files.write_many([("tree/one.txt", "1"), ("tree/sub/two.txt", "22")])
    top = sandbox.files.list("tree")
    assert [(e.name, e.type) for e in top] == [("one.txt", "file"), ("sub", "dir")]
    deep = sandbox.files.list("/workspace/tree", depth=2)
    assert [e.path for e in deep] == ["/workspace/tree/one.txt", "/workspace/tree/sub",
                                      "/workspace/tree/sub/two.txt"]
    assert "tree" in [e.name for e in sandbox.files.list()]      # the default: /workspace
    stat = sandbox.files.stat("tree/sub/two.txt")
    assert stat.size == 2 and stat.type == "file" and stat.modified_at.endswith("Z")
    assert sandbox.files.stat("tree").type == "dir"
    assert sandbox.files.exists("tree/one.txt") and not sandbox.files.exists("tree/nothing")
    with pytest.raises(cellbox.NotFoundError):
        sandbox.files.stat("tree/nothing")
    with pytest.raises(cellbox.BadRequestError):
        sandbox.files.list("tree/one.txt")           # not a directory
    sandbox.commands.run("ln -s one.txt tree/link")
    link = sandbox.files.stat("tree/link")
    assert link.type == "symlink" and link.symlink_target == "one.txt"


def test_make_dir_move_remove(sandbox):
    made = sandbox.files.make_dir("made/deep/er")
    assert made.type == "dir" and made.path == "/workspace/made/deep/er"
    assert sandbox.files.make_dir("made/deep/er").type == "dir"   # fine if it exists
    sandbox.files.write("made/file.txt", "x")
    with pytest.raises(cellbox.ConflictError):
        sandbox.files.make_dir("made/file.txt/below")
    moved = sandbox.files.move("made/file.txt", "moved/to/here.txt")
    assert moved.path == "/workspace/moved/to/here.txt"
    assert not sandbox.files.exists("made/file.txt")
    assert sandbox.files.rename("moved/to/here.txt", "moved/renamed.txt").name == "renamed.txt"
    with pytest.raises(cellbox.NotFoundError):
        sandbox.files.move("made/none", "elsewhere")

    sandbox.files.remove("moved/renamed.txt")
    assert not sandbox.files.exists("moved/renamed.txt")
    with pytest.raises(cellbox.ConflictError):
        sandbox.files.remove("made")                 # not empty
    sandbox.files.remove("made", recursive=True)
    assert not sandbox.files.exists("made")
    with pytest.raises(cellbox.NotFoundError):
        sandbox.files.remove("made")


def test_refused_paths(sandbox):
    with pytest.raises(cellbox.BadRequestError):
        sandbox.files.read("../etc/passwd")
    with pytest.raises(cellbox.ForbiddenError):
        sandbox.files.read("/proc/self/environ")
    with pytest.raises(cellbox.BadRequestError):
        sandbox.files.read("tree")                   # a directory


def _make_tree(root):
    (root / "data").mkdir(parents=True)
    (root / "data" / "table.csv").write_text("a,b\n1,2\n")
    (root / "data" / "empty").mkdir()
    (root / "bin.dat").write_bytes(bytes(range(256)))
    (root / "script.sh").write_text("#!/bin/sh\necho hi\n")
    os.chmod(root / "script.sh", 0o755)
    os.symlink("data/table.csv", root / "link.csv")


def _snapshot(root):
    found = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, root)
            if os.path.islink(path):
                found[rel] = ("link", os.readlink(path))
            elif os.path.isdir(path):
                found[rel] = ("dir",)
            else:
                with open(path, "rb") as f:
                    found[rel] = ("file", f.read(), os.stat(path).st_mode & 0o777)
    return found


def test_directory_round_trip(sandbox, tmp_path):
    source = tmp_path / "source"
    _make_tree(source)
    entry = sandbox.files.upload_dir(str(source), "project")
    assert entry.path == "/workspace/project" and entry.type == "dir"
    assert sandbox.files.read_text("project/data/table.csv") == "a,b\n1,2\n"
    assert sandbox.files.stat("project/link.csv").type == "symlink"
    assert sandbox.commands.run("./script.sh", cwd="/workspace/project").stdout == "hi\n"

    sandbox.run_code("open('project/data/made_inside.txt', 'w').write('from the kernel')")
    back = tmp_path / "back"
    written = sandbox.files.download_dir("project", str(back))
    assert str(back / "data" / "made_inside.txt") in written
    expected = _snapshot(source)
    expected["data/made_inside.txt"] = ("file", b"from the kernel", 0o644)
    assert _snapshot(back) == expected
    uid = os.getuid()
    assert all(os.lstat(p).st_uid == uid for p in written)

    # into an existing directory, replacing what is there
    (source / "data" / "table.csv").write_text("changed\n")
    sandbox.files.upload_dir(str(source), "project")
    assert sandbox.files.read_text("project/data/table.csv") == "changed\n"
    with pytest.raises(NotADirectoryError):
        sandbox.files.upload_dir(str(source / "bin.dat"), "x")
    with pytest.raises(cellbox.NotFoundError):
        sandbox.files.download_dir("no/such/dir", str(tmp_path / "nothing"))


def test_download_never_writes_outside(tmp_path):
    """A hostile archive (absolute names, `..`, a link then a file through it, a device) is
    refused or skipped by the extraction, whatever the server sends."""
    import tarfile

    from cellbox.files import _extract

    def archive(*members):
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            for info, data in members:
                tar.addfile(info, io.BytesIO(data) if data is not None else None)
        buf.seek(0)
        return tarfile.open(fileobj=buf)

    def member(name, data=b"", kind=tarfile.REGTYPE, linkname="", mode=0o644):
        info = tarfile.TarInfo(name)
        info.type, info.linkname, info.mode = kind, linkname, mode
        info.size = len(data) if kind == tarfile.REGTYPE else 0
        return info, (data if kind == tarfile.REGTYPE else None)

    dest = tmp_path / "dest"
    dest.mkdir()
    for bad in ("../escape.txt", "/abs.txt", "a/../../escape.txt"):
        with pytest.raises(cellbox.CellboxError, match="outside"):
            _extract(archive(member(bad, b"x")), str(dest))
    with pytest.raises(cellbox.CellboxError, match="link"):
        _extract(archive(member("out", kind=tarfile.SYMTYPE, linkname=str(tmp_path)),
                         member("out/through.txt", b"x")), str(dest))
    assert not (tmp_path / "through.txt").exists() and not (tmp_path / "escape.txt").exists()
    written = _extract(archive(member("dev", kind=tarfile.CHRTYPE), member("fifo", kind=tarfile.FIFOTYPE),
                               member("setuid", b"s", mode=0o4755)), str(dest))
    assert written == [str(dest / "setuid")]
    assert os.stat(dest / "setuid").st_mode & 0o7777 == 0o755
