"""sys.stdout / sys.stderr that write straight through to fd 1 / fd 2.

The daemon reads those pipes and publishes `stream` messages live, draining them before it
handles our next channel frame. That keeps output in order with display_data and status only
if nothing sits in a buffer here: every write() reaches the pipe before it returns.
"""
import fcntl
import io
import os
import select
import struct
import sys
import termios
import time


class _FdWriter(io.RawIOBase):
    """A raw writer that always writes everything: partial writes and EAGAIN on a pipe are
    retried, where io.FileIO would return a short count that TextIOWrapper silently drops."""

    def __init__(self, fd, name):
        super().__init__()
        self._fd = fd
        self.name = name

    def writable(self):
        return True

    def fileno(self):
        return self._fd

    def write(self, data):
        view = memoryview(data).cast("B")
        total = len(view)
        while view:
            try:
                written = os.write(self._fd, view)
            except BlockingIOError:
                select.select([], [self._fd], [])
                continue
            view = view[written:]
        return total


def _unbuffered_text(fd, name):
    # write_through: TextIOWrapper hands each write() to the raw writer at once.
    return io.TextIOWrapper(_FdWriter(fd, name), encoding="UTF-8", errors="backslashreplace",
                            write_through=True)


def install():
    """Replace sys.stdout and sys.stderr (user code writes through them)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass
    sys.stdout = _unbuffered_text(1, "<stdout>")
    sys.stderr = _unbuffered_text(2, "<stderr>")


def flush():
    """Flush whatever sys.stdout / sys.stderr are now (user code may have replaced them), as
    ipykernel does before every message, then wait until the daemon has read our pipes: the
    pipes and the channel are separate streams, and the daemon orders output before a message
    only if the output has left the pipe when the message is sent (docs/kernel-protocol.md)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # a user's stream object is not ours to debug here
            pass
    _wait_until_read()


_PIPE_WAIT_LIMIT = 1.0   # seconds; a daemon that stopped reading must not hang the kernel


def _unread_bytes(fd):
    try:
        return struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0]
    except OSError:
        return 0    # not a pipe (a terminal, /dev/null): nothing to wait for


def _wait_until_read():
    deadline = None
    delay = 0.00005
    while _unread_bytes(1) or _unread_bytes(2):
        now = time.monotonic()
        if deadline is None:
            deadline = now + _PIPE_WAIT_LIMIT
        elif now > deadline:
            return
        time.sleep(delay)
        delay = min(delay * 2, 0.002)


def log(text):
    """One line about the kernel itself, on fd 2 directly (not through a user's sys.stderr)."""
    line = ("cellbox-kernel: " + text.replace("\n", " ") + "\n").encode("utf-8", "backslashreplace")
    try:
        _FdWriter(2, "<log>").write(line)
    except OSError:
        pass
