"""sandbox.files: the sandbox's file system. A relative path is relative to /workspace;
the daemon resolves every path inside the sandbox (`..` is refused, links never leave it).
Whole directories travel as tar archives, made and unpacked with the standard tarfile."""
import base64
import os
import posixpath
import tarfile
import tempfile

from . import errors
from .models import EntryInfo

_SPOOL = 16 << 20   # archives up to this size stay in memory, larger ones go to a temp file


def _as_bytes(data):
    if isinstance(data, str):
        return data.encode("utf-8")
    if isinstance(data, (bytes, bytearray, memoryview)):
        return bytes(data)
    raise TypeError(f"expected str, bytes or a binary file object, got {type(data).__name__}")


def _body(data):
    """(body, headers) for a PUT: bytes as they are, a seekable file streamed with its length."""
    if hasattr(data, "read"):
        try:
            start = data.tell()
            size = data.seek(0, os.SEEK_END) - start
            data.seek(start)
            return data, {"Content-Length": str(size), "Content-Type": "application/octet-stream"}
        except (OSError, AttributeError, ValueError):
            data = data.read()
    data = _as_bytes(data)
    return data, {"Content-Type": "application/octet-stream"}


class Files:
    """File operations of one sandbox (sandbox.files)."""

    def __init__(self, sandbox):
        self._sandbox = sandbox

    def _call(self, method, sub, query=None, **kw):
        return self._sandbox._call(method, sub, query, **kw)

    # -- single files -----------------------------------------------------------------------

    def read(self, path):
        """The file's bytes."""
        sb = self._sandbox
        return sb.connection.read("GET", sb._path("files"), sb._query({"path": path}))

    def read_text(self, path, encoding="utf-8"):
        return self.read(path).decode(encoding)

    def write(self, path, data):
        """Write str (UTF-8), bytes or a binary file object to `path`, creating parent
        directories; replaces a file that is there. Returns its EntryInfo."""
        body, headers = _body(data)
        return EntryInfo.from_model(self._call("PUT", "files", {"path": path}, data=body, headers=headers))

    def write_many(self, files):
        """Write several files in one request: an iterable of (path, data) pairs or of dicts
        {"path", "data"} (data: str or bytes), or a dict {path: data}. Returns their entries."""
        if isinstance(files, dict):
            files = files.items()
        batch = []
        for item in files:
            if isinstance(item, dict):
                path, data = item["path"], item.get("data", item.get("content", b""))
            else:
                path, data = item
            batch.append({"path": path, "content": base64.b64encode(_as_bytes(data)).decode(),
                          "encoding": "base64"})
        return [EntryInfo.from_model(m) for m in self._call("POST", "files/batch", json_body={"files": batch})]

    def exists(self, path):
        try:
            self.stat(path)
            return True
        except errors.NotFoundError:
            return False

    def stat(self, path):
        return EntryInfo.from_model(self._call("GET", "files/stat", {"path": path}))

    def list(self, path=".", depth=1):
        """The entries under the directory `path`, sorted by path, `depth` levels deep (1-10)."""
        return [EntryInfo.from_model(m) for m in self._call("GET", "files/list", {"path": path, "depth": depth})]

    def make_dir(self, path):
        """Create a directory and its parents (fine if it exists). Returns its EntryInfo."""
        return EntryInfo.from_model(self._call("POST", "files/mkdir", json_body={"path": path}))

    def move(self, source, destination):
        """Move or rename; creates the parents of `destination` and replaces a file there.
        Returns the EntryInfo of the new path."""
        return EntryInfo.from_model(self._call("POST", "files/move", json_body={"from": source, "to": destination}))

    rename = move

    def remove(self, path, recursive=False):
        """Delete a file, a link or an empty directory; recursive=True for a whole tree."""
        self._call("DELETE", "files", {"path": path, "recursive": True if recursive else None})

    # -- directories --------------------------------------------------------------------------

    def upload_dir(self, local_dir, path):
        """Copy the contents of the local directory `local_dir` into `path` in the sandbox
        (created if missing) as one gzip-compressed tar. Links are sent as links. Returns the
        EntryInfo of `path`."""
        if not os.path.isdir(local_dir):
            raise NotADirectoryError(local_dir)
        with tempfile.SpooledTemporaryFile(max_size=_SPOOL) as archive:
            with tarfile.open(fileobj=archive, mode="w:gz", format=tarfile.PAX_FORMAT, compresslevel=6) as tar:
                for name in sorted(os.listdir(local_dir)):
                    tar.add(os.path.join(local_dir, name), arcname=name, filter=_anonymous)
            size = archive.tell()
            archive.seek(0)
            headers = {"Content-Type": "application/x-tar", "Content-Length": str(size)}
            model = self._call("PUT", "files/tar", {"path": path}, data=archive, headers=headers)
        return EntryInfo.from_model(model)

    def download_dir(self, path, local_dir):
        """Copy the contents of the sandbox directory `path` into `local_dir` (created if
        missing). Returns the local paths written, in archive order. Nothing is written
        outside `local_dir`, and devices, FIFOs and set-id bits are never made."""
        sb = self._sandbox
        os.makedirs(local_dir, exist_ok=True)
        with tempfile.SpooledTemporaryFile(max_size=_SPOOL) as archive:
            sb.connection.copy_to("GET", sb._path("files/tar"), archive, sb._query({"path": path}))
            archive.seek(0)
            with tarfile.open(fileobj=archive, mode="r:*") as tar:
                return _extract(tar, local_dir)


def _anonymous(info):
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def _inside(root, path):
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _extract(tar, local_dir):
    """Unpack member by member after checking each: a relative name without `..`, a regular
    file, directory or link, its parent directory really inside `local_dir` (not reached
    through a link), owned by us, without set-id bits."""
    root = os.path.realpath(local_dir)
    written = []
    safe_filter = {"filter": "tar"} if hasattr(tarfile, "tar_filter") else {}
    for member in tar.getmembers():
        name = posixpath.normpath(member.name)
        if name in (".", ""):
            continue
        if posixpath.isabs(name) or name == ".." or name.startswith("../"):
            raise errors.CellboxError(f"refusing archive entry {member.name!r}: outside the target directory")
        if not (member.isfile() or member.isdir() or member.issym()):
            continue  # devices, FIFOs, hard links: never made
        target = os.path.join(root, *name.split("/"))
        if not _inside(root, os.path.realpath(os.path.dirname(target))):
            raise errors.CellboxError(f"refusing archive entry {member.name!r}: its directory is reached "
                                      "through a link that leaves the target directory")
        if os.path.islink(target) or (member.issym() and os.path.lexists(target)):
            os.unlink(target)  # replace a link rather than write through it
        member.name = name
        member.mode &= 0o777
        member.uid, member.gid = os.getuid(), os.getgid()
        member.uname = member.gname = ""
        tar.extract(member, root, **safe_filter)
        written.append(target)
    return written
