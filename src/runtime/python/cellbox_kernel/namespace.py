"""A kernel's variables carried at the Python level, name by name, with Debian's python3-dill:
the fallback where a process image cannot be restored (kernel/namespace_transfer.h).

save() pickles each user name of the shell's namespace on its own, so one name that cannot be
pickled (a generator, a socket, a third-party object whose __reduce__ raises) is reported by
name and the others are still carried. Modules are carried by name and imported again at load.
IPython's own names (In, Out, _, __, ___, _i*, _<n>, _oh, _ih, _dh, get_ipython, exit, quit,
the dunders, and whatever the shell put in user_ns_hidden, while still the same object) are not
the user's and are left out.

The container (a file the daemon keeps, written from offset 0; integers little-endian):

    magic      b"CBXNS01\n"
    records, until the end of the file, each:
      kind     1 byte: b"v" a value (its data is a pickle), b"m" a module (its data is the
               module's import name, UTF-8)
      name     u16 length, then the name in UTF-8
      data     u64 length, then the data
      memo     u32: the pickle memo's size after this record
      shares   u32 count, then that many u32: the earlier records (numbered from 0) whose
               objects this one refers to

Every value record is one whole pickle, made by CPython's C pickler (fast on many small objects,
a column of strings) or, for what only dill pickles right (what the namespace itself defines:
its functions, classes and their instances, taken by value), by dill's; one memo is kept from
record to record, and the records are loaded in order by unpicklers that share one memo: two names
bound to one object are one object again after a load, and an instance of a class defined in a
cell still is an instance of that (one) class. A record that fails to pickle is cut off the file
and the memo put back as it was before it, so it leaves no trace. A record that fails to load
leaves its memo slots empty (`memo` says how many), and every later record that `shares` its
objects is reported not loaded rather than loaded with holes. Functions and classes defined in
cells are pickled by value; their globals are the namespace itself (by reference: after a load
they see the new kernel's namespace), and only where that fails the globals they use are copied
(dill's recurse=True).

The frames (docs/kernel-protocol.md, "Namespace transfer"): the bytes cross the sandbox's edge
in memfds the kernel makes, which the daemon takes with pidfd_getfd. save_namespace: the kernel
writes the container into a new memfd, seals it, keeps it open and answers namespace_saved with
its fd number; namespace_release closes it. load_namespace: the kernel makes an empty memfd and
answers namespace_buffer with its fd number; the daemon writes the container into it and sends
namespace_filled; the kernel loads it, closes it and answers namespace_loaded.
"""
import bisect
import fcntl
import importlib
import io
import json
import mmap
import os
import pickle
import re
import struct
import sys
import types

from . import stdio
from .channel import ChannelClosed

MAGIC = b"CBXNS01\n"
_RECORD_VALUE = b"v"
_RECORD_MODULE = b"m"
_NAME_HEADER = struct.Struct("<H")
_DATA_HEADER = struct.Struct("<Q")
_MEMO_HEADER = struct.Struct("<II")  # the memo's size after the record, the shares' count
_SHARE = struct.Struct("<I")
_SLOT = struct.Struct("<i")  # BININT's argument
_MAX_REPORTED = 1000   # names listed in a report: a frame stays far below the channel's limit
_MAX_WHY = 300
_IPYTHON_NAMES = {"In", "Out", "_", "__", "___", "_oh", "_ih", "_dh", "_i", "_ii", "_iii",
                  "get_ipython", "exit", "quit"}
_IPYTHON_PATTERN = re.compile(r"_i?\d+\Z|__.*__\Z")


class NamespaceTooLarge(Exception):
    """Writing on would pass the container's byte limit."""


class CorruptContainer(Exception):
    """The container is not one save() wrote, or was cut short."""


# ------------------------------------------------------------------ the frames


class _Transfer:
    held = None   # the last saved container's memfd, kept open until the daemon has taken it


# frame type -> (the function that answers it, the type of its answer)
_FRAMES = {
    "save_namespace": ("_answer_save", "namespace_saved"),
    "namespace_release": ("_release", None),
    "load_namespace": ("_answer_buffer", "namespace_loaded"),
    "namespace_filled": ("_answer_load", "namespace_loaded"),
}


def handle(kernel, message):
    """The daemon's namespace frames ({"channel": "cellbox", "type": ...}); others are ignored.
    Whatever goes wrong is answered (the daemon waits for an answer), never raised into the
    kernel's loop."""
    function, answer = _FRAMES.get(message.get("type"), (None, None))
    if function is None:
        return
    try:
        globals()[function](kernel, message)
    except ChannelClosed:
        raise
    except Exception as error:  # noqa: BLE001 (a bug here must not end the kernel)
        stdio.log(f"{message.get('type')} failed: {type(error).__name__}: {error}")
        if answer:
            _send(kernel, {"type": answer, "why": f"{type(error).__name__}: {error}"})


def _send(kernel, body):
    kernel.channel.send(json.dumps(dict(body, channel="cellbox")).encode("utf-8"))


def _release(_kernel=None, _message=None):
    if _Transfer.held is not None:
        os.close(_Transfer.held)
        _Transfer.held = None


def _answer_save(kernel, message):
    _release()
    max_bytes = message.get("max_bytes")
    if not isinstance(max_bytes, int) or isinstance(max_bytes, bool) or max_bytes <= 0:
        max_bytes = 1 << 62
    try:
        fd = os.memfd_create("cellbox-namespace", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    except OSError as error:
        _send(kernel, {"type": "namespace_saved", "why": f"cannot make a memfd: {error}"})
        return
    try:
        with open(fd, "w+b", closefd=False) as file:
            report = save(file, max_bytes, kernel.shell)
        # Sealed: what the daemon copies cannot change under it.
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW
                    | fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SEAL)
    except (OSError, MemoryError) as error:
        os.close(fd)
        _send(kernel, {"type": "namespace_saved", "why": f"cannot write the namespace: {error}"})
        return
    _Transfer.held = fd
    _send(kernel, {"type": "namespace_saved", "fd": fd, "bytes": report["bytes"],
                   "report": report})


def _answer_buffer(kernel, _message):
    _release()
    try:
        # Sealing allowed, none set: the daemon tells a memfd from a tmpfs file by that.
        fd = os.memfd_create("cellbox-namespace", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    except OSError as error:
        _send(kernel, {"type": "namespace_loaded", "why": f"cannot make a memfd: {error}"})
        return
    _Transfer.held = fd
    _send(kernel, {"type": "namespace_buffer", "fd": fd})


def _answer_load(kernel, message):
    fd, _Transfer.held = _Transfer.held, None
    if fd is None:
        _send(kernel, {"type": "namespace_loaded", "why": "no load_namespace came before"})
        return
    try:
        size = message.get("bytes")
        with open(fd, "rb") as file:  # closes fd
            if isinstance(size, int) and os.fstat(file.fileno()).st_size != size:
                raise CorruptContainer(f"the buffer holds {os.fstat(file.fileno()).st_size} "
                                       f"bytes, not the {size} sent")
            report = load(file, kernel.shell)
    except (OSError, CorruptContainer) as error:
        _send(kernel, {"type": "namespace_loaded", "why": str(error)})
        return
    _send(kernel, {"type": "namespace_loaded", "report": report})


# ------------------------------------------------------------------ saving


def user_names(shell):
    """The user's names in the shell's namespace, in insertion order."""
    hidden = shell.user_ns_hidden
    missing = object()
    names = []
    for name, value in shell.user_ns.items():
        if not isinstance(name, str) or name in _IPYTHON_NAMES or _IPYTHON_PATTERN.match(name):
            continue
        if hidden.get(name, missing) is value:
            continue
        names.append(name)
    return names


class _BoundedWriter:
    """The file, refusing to grow past `limit` bytes: an object too large for the limit stops
    while it is being written, before it takes the memory."""

    def __init__(self, file, limit):
        self.file = file
        self.limit = limit

    def write(self, data):  # bytes, or a PickleBuffer (the C pickler's large buffers, in place)
        with memoryview(data) as view:
            if self.file.tell() + view.nbytes > self.limit:
                raise NamespaceTooLarge
            return self.file.write(view)


class _SharingMemo(dict):
    """pickle's memo (id -> (index, object)), noting each hit on an object an earlier record
    memoized (index below `floor`): what the record being written shares with earlier ones."""

    def __init__(self, *args):
        super().__init__(*args)
        self.floor = 0
        self.hits = set()

    def _note(self, entry):
        if entry is not None and entry[0] < self.floor:
            self.hits.add(entry[0])
        return entry

    def get(self, key, default=None):
        return self._note(super().get(key, default))

    def __getitem__(self, key):
        return self._note(super().__getitem__(key))

    def copy(self):
        return _SharingMemo(self)


class _NeedsDill(Exception):
    """An object the namespace itself defines: the C pickler would take it by reference."""


class _FastPickler(pickle.Pickler):
    """The C pickler, noting which objects of earlier records a record refers to (`hits` of the
    memo it starts from) and refusing the objects only dill pickles right. persistent_id is
    called for every object, before the memo is looked at; it never names one (None)."""

    def __init__(self, file, earlier):
        super().__init__(file, protocol=5)
        self.earlier = earlier

    def persistent_id(self, obj):
        if type(obj).__module__ == "__main__" or (
                isinstance(obj, _BY_VALUE_KINDS) and getattr(obj, "__module__", None) == "__main__"):
            raise _NeedsDill
        self.earlier.get(id(obj))  # _SharingMemo.get notes a hit on an earlier record's object
        return None

    def reducer_override(self, obj):
        return _reduce_open_file(obj)


_BY_VALUE_KINDS = (types.FunctionType, type)


class _Saver:
    def __init__(self, file, max_bytes, main_module):
        import dill  # here, not at import: a kernel that never saves never pays for it
        self.dill = dill
        self.file = file
        self.max_bytes = max_bytes
        self.writer = _BoundedWriter(file, max_bytes)
        self.main_module = main_module
        self.memo = _SharingMemo()
        self.memo_ends = []   # per record written: the memo's size after it
        self.carried, self.not_carried = [], []

    def _dump(self, value, recurse):
        pickler = self.dill.Pickler(self.writer, protocol=5, recurse=recurse)
        pickler._main = self.main_module  # noqa: SLF001 (globals that are __main__'s: by reference)
        pickler.reducer_override = _reduce_open_file  # not dill's file handling: see there
        pickler.memo = self.memo
        pickler.dump(value)

    def add(self, name, value):
        start = self.file.tell()
        saved_memo = self.memo.copy()
        self.memo.floor = len(self.memo)
        self.memo.hits = set()
        try:
            if isinstance(value, types.ModuleType):
                self._record(_RECORD_MODULE, name, lambda: self.writer.write(
                    value.__name__.encode("utf-8")))
            else:
                self._record(_RECORD_VALUE, name, lambda: self._pickle(value))
        except NamespaceTooLarge:
            why = f"the namespace is over {self.max_bytes} bytes"
        except RecursionError:
            why = "RecursionError: nested too deeply to pickle"
        except Exception as error:  # noqa: BLE001 (anything user code's __reduce__ raises)
            why = f"{type(error).__name__}: {error}"
        else:
            self.carried.append(name)
            return
        self.file.seek(start)
        self.file.truncate()
        self.memo = saved_memo
        self.not_carried.append({"name": name, "why": why})

    def _record(self, kind, name, write_data):
        encoded = name.encode("utf-8", "surrogatepass")
        self.writer.write(kind + _NAME_HEADER.pack(len(encoded)) + encoded)
        length_at = self.file.tell()
        self.writer.write(_DATA_HEADER.pack(0))
        write_data()
        end = self.file.tell()
        self.file.seek(length_at)
        self.file.write(_DATA_HEADER.pack(end - length_at - _DATA_HEADER.size))
        self.file.seek(end)
        shares = sorted({bisect.bisect_right(self.memo_ends, index) for index in self.memo.hits})
        self.writer.write(_MEMO_HEADER.pack(len(self.memo), len(shares)) + b"".join(
            _SHARE.pack(record) for record in shares))
        self.memo_ends.append(len(self.memo))

    def _pickle(self, value):
        data_start = self.file.tell()
        try:
            self._dump_fast(value)
            return
        except NamespaceTooLarge:
            raise
        except Exception:  # noqa: BLE001 (dill's turn: it pickles what the C pickler cannot)
            self.file.seek(data_start)
            self.file.truncate()
            self.memo.hits = set()
        try:
            self._dump(value, recurse=False)
            return
        except NamespaceTooLarge:
            raise
        except Exception as first:  # noqa: BLE001
            error = first
        self.file.seek(data_start)
        self.file.truncate()
        hits = self.memo.hits
        self.memo = self._memo_before_record()
        self.memo.hits = hits
        # A function whose globals cannot be referenced: copy the globals it uses instead.
        try:
            self._dump(value, recurse=True)
        except NamespaceTooLarge:
            raise
        except Exception:  # noqa: BLE001 (the first error says more: it is the usual path's)
            raise error from None

    def _dump_fast(self, value):
        """CPython's C pickler, with the same memo: some 20 times dill's speed on many small
        objects (a column of strings). It would take what the namespace itself defines (its
        functions, classes and their instances: module __main__) by reference to a name that
        a load has not made yet, so those go to dill, by value."""
        pickler = _FastPickler(self.writer, self.memo)
        pickler.memo = self.memo
        pickler.dump(value)
        memo = _SharingMemo(pickler.memo.copy())
        memo.floor, memo.hits = self.memo.floor, self.memo.hits
        self.memo = memo

    def _memo_before_record(self):
        memo = _SharingMemo({key: entry for key, entry in self.memo.items()
                             if entry[0] < self.memo.floor})
        memo.floor = self.memo.floor
        return memo


# ------------------------------------------------------------------ open files

_FILE_KINDS = (io.TextIOWrapper, io.BufferedReader, io.BufferedWriter, io.BufferedRandom,
               io.FileIO)


def _reduce_open_file(obj):
    """A file object opened by path, carried as its name, the path it is open at, its mode,
    position and encoding, or NotImplemented for anything else. Not dill's way: dill reopens a
    file with the mode it was opened with, and "w" empties it - the restored sandbox's
    workspace file, written and closed before the snapshot, would be empty - and it leaves the
    position at 0. The unwritten buffer is flushed first, so the bytes the position counts are
    in the file the snapshot copies."""
    if type(obj) not in _FILE_KINDS:
        return NotImplemented
    layers = [obj]
    while hasattr(layers[-1], "buffer") or hasattr(layers[-1], "raw"):
        layers.append(getattr(layers[-1], "buffer", None) or layers[-1].raw)
    name = layers[-1].name
    if not isinstance(name, (str, bytes)):
        raise TypeError(f"a file opened from descriptor {name} has no path to reopen it by")
    text = isinstance(obj, io.TextIOWrapper)
    kind = "text" if text else "buffered" if len(layers) > 1 else "raw"
    encoding, errors = (obj.encoding, obj.errors) if text else (None, None)
    if obj.closed:
        return _reopen_file, (name, None, kind, obj.mode, None, encoding, errors)
    obj.flush()
    # The path the descriptor is open at, not the name: a relative name means the working
    # directory of the moment it was opened.
    path = os.readlink(f"/proc/self/fd/{obj.fileno()}")
    return _reopen_file, (name, path, kind, obj.mode, obj.tell(), encoding, errors)


def _reopen_file(name, path, kind, mode, position, encoding, errors):
    """The file object _reduce_open_file carried: opened at `path` without O_CREAT or O_TRUNC
    whatever its mode ("w" and "x" write into the file as it is; a file gone since is an
    error, so the name is reported not loaded), at its position; a closed one (path None) is
    closed again without touching the file (it is opened on /dev/null, then named)."""
    if "+" in mode:
        flags = os.O_RDWR
    else:
        flags = os.O_RDONLY if "r" in mode else os.O_WRONLY
    if "a" in mode:
        flags |= os.O_APPEND
    descriptor = os.open(path if path is not None else os.devnull, flags | os.O_CLOEXEC)
    try:
        file = open(descriptor, mode.replace("x", "w"), buffering=0 if kind == "raw" else -1,
                    encoding=encoding, errors=errors)
    except BaseException:
        os.close(descriptor)
        raise
    raw = file if kind == "raw" else file.raw if kind == "buffered" else file.buffer.raw
    raw.name = name
    if kind == "text":
        file.mode = mode
    if path is None:
        file.close()
    elif "a" not in mode:
        try:
            file.seek(position)
        except BaseException:
            file.close()
            raise
    return file


def save(file, max_bytes, shell):
    """Writes the container of `shell`'s user names into `file` (binary, from its position, at
    most max_bytes); returns the report {"carried", "not_carried", "bytes"}."""
    file.write(MAGIC)
    saver = _Saver(file, max_bytes, _main_module(shell))
    for name in user_names(shell):
        saver.add(name, shell.user_ns[name])
    file.flush()
    return _report(saver.carried, saver.not_carried, file.tell())


def _main_module(shell):
    module = getattr(shell, "user_module", None)
    return module if module is not None else sys.modules["__main__"]


def _report(carried, not_carried, size):
    report = {
        "carried": [_short(name, 200) for name in carried[:_MAX_REPORTED]],
        "not_carried": [{"name": _short(entry["name"], 200), "why": _short(entry["why"], _MAX_WHY)}
                        for entry in not_carried[:_MAX_REPORTED]],
        "bytes": size,
    }
    if len(carried) > _MAX_REPORTED or len(not_carried) > _MAX_REPORTED:
        report["unlisted"] = (max(0, len(carried) - _MAX_REPORTED)
                              + max(0, len(not_carried) - _MAX_REPORTED))
    return report


def _short(text, limit):
    text = text.encode("utf-8", "replace").decode("utf-8")
    return text if len(text) <= limit else text[:limit - 3] + "..."


# ------------------------------------------------------------------ loading


def read_records(data):
    """[(kind, name, data, memo_end, shares)] of a whole container; raises CorruptContainer
    naming what is wrong, before anything is loaded."""
    if not bytes(data[:len(MAGIC)]) == MAGIC:
        raise CorruptContainer("not a namespace container (it does not begin with CBXNS01)")
    records = []
    at = len(MAGIC)
    while at < len(data):
        number = len(records) + 1
        kind = bytes(data[at:at + 1])
        if kind not in (_RECORD_VALUE, _RECORD_MODULE):
            raise CorruptContainer(f"record {number} at byte {at} has no valid kind")
        name_length = _unpack(_NAME_HEADER, data, at + 1, number)[0]
        name_at = at + 1 + _NAME_HEADER.size
        try:
            name = bytes(data[name_at:name_at + name_length]).decode("utf-8", "surrogatepass")
        except UnicodeDecodeError:
            raise CorruptContainer(f"record {number}'s name is not UTF-8") from None
        data_length = _unpack(_DATA_HEADER, data, name_at + name_length, number)[0]
        data_at = name_at + name_length + _DATA_HEADER.size
        if data_length > len(data) - data_at:
            raise CorruptContainer(f"record {number} ({name!r}) is cut short")
        memo_end, share_count = _unpack(_MEMO_HEADER, data, data_at + data_length, number)
        shares_at = data_at + data_length + _MEMO_HEADER.size
        if share_count > len(records) or shares_at + share_count * _SHARE.size > len(data):
            raise CorruptContainer(f"record {number} ({name!r}) is cut short")
        shares = [_SHARE.unpack_from(data, shares_at + i * _SHARE.size)[0]
                  for i in range(share_count)]
        if any(share >= len(records) for share in shares) or \
                (records and memo_end < records[-1][3]):
            raise CorruptContainer(f"record {number} ({name!r}) names records that do not exist")
        records.append((kind, name, data[data_at:data_at + data_length], memo_end, shares))
        at = shares_at + share_count * _SHARE.size
    return records


def _unpack(layout, data, at, number):
    if at + layout.size > len(data):
        raise CorruptContainer(f"record {number} is cut short")
    return layout.unpack_from(data, at)


class _RecordReader:
    """The input of the unpickler a load uses, switched from record to record: its memo then
    spans them all. No `peek`: the unpickler reads no further than each record's pickle."""

    def __init__(self):
        self.data = b""
        self.at = 0

    def serve(self, data):
        self.data = data
        self.at = 0

    def read(self, size=-1):
        end = len(self.data) if size is None or size < 0 else min(len(self.data), self.at + size)
        chunk = bytes(self.data[self.at:end])
        self.at = end
        return chunk

    def readinto(self, buffer):  # large bytes and arrays: one copy, straight into place
        size = min(len(buffer), len(self.data) - self.at)
        memoryview(buffer).cast("B")[:size] = self.data[self.at:self.at + size]
        self.at += size
        return size

    def readline(self):
        end = bytes(self.data[self.at:self.at + 65536]).find(b"\n")
        return self.read(len(self.data) - self.at if end < 0 else end + 1)


def _unpickler(reader, main_module, memo=None, memo_end=0):
    """A dill unpickler reading from `reader`; with `memo` (index -> object), one whose memo
    slots 0..memo_end-1 hold those objects (None where `memo` has none), numbering on from
    memo_end. CPython's C unpickler cannot be given a memo through its `.memo` setter (it fills
    the old array and numbers on from a count it does not update): the slots are filled by
    loading a pickle that memoizes each one, its objects handed in by persistent_load."""
    import dill  # here, not at import: a kernel that never loads never pays for it

    class Unpickler(dill.Unpickler):
        handing_in = None

        def persistent_load(self, index):
            if self.handing_in is None:
                raise CorruptContainer("the container holds a persistent id")
            return self.handing_in.get(index)

    unpickler = Unpickler(reader)
    unpickler._main = main_module  # noqa: SLF001 (globals that are __main__'s)
    if memo is not None:
        slots = b"".join(b"J" + _SLOT.pack(index) + b"Q\x94a" for index in range(memo_end))
        reader.serve(b"\x80\x05]" + slots + b".")  # a list (not memoized) of the slots
        unpickler.handing_in = memo
        try:
            unpickler.load()
        finally:
            unpickler.handing_in = None
    return unpickler


def _mapped(file):
    """The file's bytes from its start: mapped where it is a file with a descriptor (a memfd:
    one copy of a large namespace less), else read."""
    try:
        size = os.fstat(file.fileno()).st_size
        if size:
            return memoryview(mmap.mmap(file.fileno(), size, prot=mmap.PROT_READ))
    except (OSError, ValueError, io.UnsupportedOperation):
        pass
    return memoryview(file.read())


def load(file, shell):
    """Loads a container (a binary file, from its start) into `shell`'s namespace; returns
    the report. A container that is not whole loads nothing (CorruptContainer)."""
    data = _mapped(file)
    records = read_records(data)
    main_module = _main_module(shell)
    reader = _RecordReader()
    unpickler = _unpickler(reader, main_module)
    failed = {}   # record number -> its name, for the records that did not load
    carried, not_carried = [], []
    for number, (kind, name, payload, memo_end, shares) in enumerate(records):
        try:
            broken = [failed[share] for share in shares if share in failed]
            if broken:
                raise CorruptContainer(f"it shares objects with {broken[0]!r}, which did not load")
            if kind == _RECORD_MODULE:
                value = importlib.import_module(bytes(payload).decode("utf-8"))
            else:
                reader.serve(payload)
                value = unpickler.load()
        except Exception as error:  # noqa: BLE001 (anything a class's __setstate__ raises)
            why = str(error) if isinstance(error, CorruptContainer) else \
                f"{type(error).__name__}: {error}"
            not_carried.append({"name": name, "why": why})
            failed[number] = name
            # A failed load may leave part of its pickle buffered in the unpickler: the next
            # record gets a new one, numbering from where this record's slots end (the slots
            # it did not fill stay empty; no record that `shares` them is loaded).
            unpickler = _unpickler(reader, main_module, unpickler.memo.copy(), memo_end)
            continue
        shell.user_ns[name] = value
        carried.append(name)
    return _report(carried, not_carried, len(data))
