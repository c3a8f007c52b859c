"""Frames on the channel fd: a u32 little-endian length, then that many bytes (UTF-8 JSON).

The fd is non-blocking: reads take only what is there (so "what is already waiting" can be
collected without blocking), and waits are poll() calls, which a SIGINT can break while user
code waits for input. All reading and writing happens inside InterruptGate.shielded(), so a
KeyboardInterrupt never leaves half a frame written or read bytes dropped.

Adoption (docs/kernel-protocol.md): a daemon that takes over a kernel its predecessor started
sends it a new channel, one byte with the descriptor attached (SCM_RIGHTS). Reads use recvmsg to
see it: the whole frames read before it are kept, the partial rest (half a frame the dead daemon
wrote) and the marker byte are dropped, the new channel replaces the old one on the same fd
number, and `on_switch` is told so that the kernel can say where it stands. Sends look for a
switch first, so a cell that is running when its kernel is adopted goes on writing to the new
daemon.
"""
import array
import collections
import os
import select
import socket

from .stdio import log

MAX_FRAME = 64 << 20   # the contract's limit, both directions
_READ_CHUNK = 256 << 10


_MAX_FDS = 4


def _received_fds(ancillary):
    fds = array.array("i")
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[:len(data) - len(data) % fds.itemsize])
    return list(fds)


class ChannelClosed(Exception):
    """The daemon closed its end: nothing more will come, nothing we send is read."""


class Channel:
    def __init__(self, fd, gate):
        # Children (`!cmd`, subprocess, os.system) must never hold the channel: they could
        # write into it, and they would keep it open after we die.
        os.set_inheritable(fd, False)
        os.set_blocking(fd, False)
        self._fd = fd
        self._gate = gate
        self._inbox = bytearray()   # bytes read but not yet split into frames
        self._skip = 0              # bytes left of an oversized frame being discarded
        self._frames = collections.deque()
        self._eof = False
        # recvmsg needs a socket object; it owns fd for the life of the process (kept here, so
        # it is never collected and closed).
        self._socket = socket.socket(fileno=fd)
        self.on_switch = None       # called after a switch, outside any read or write
        self._switched = False

    def _notify_switch(self):
        if self._switched and self.on_switch:
            self._switched = False
            self.on_switch()

    @property
    def fd(self):
        return self._fd

    def put_back(self, body):
        """A frame read outside this object (the checkpoint point's) is the next one received."""
        self._frames.appendleft(body)

    def send(self, body):
        self.send_all([body])

    def send_all(self, bodies):
        """Frames in order, in one write where they fit: one wake-up of the daemon, not several."""
        frames = []
        for body in bodies:
            if len(body) > MAX_FRAME:
                raise ValueError(f"frame of {len(body)} bytes exceeds the {MAX_FRAME}-byte limit")
            frames += (len(body).to_bytes(4, "little"), body)
        self._read_available()  # a new channel waiting: these frames go to the new daemon
        self._notify_switch()
        with self._gate.shielded():
            self._write_all(b"".join(frames))

    def receive(self):
        """The next frame's body; waits for one."""
        while not self._frames:
            if self._eof:
                raise ChannelClosed
            self._wait(select.POLLIN)
            self._read_available()
            self._notify_switch()
        return self._frames.popleft()

    def receive_ready(self):
        """The bodies of all frames already waiting; never blocks."""
        self._read_available()
        self._notify_switch()
        frames = list(self._frames)
        self._frames.clear()
        return frames

    def _write_all(self, data):
        view = memoryview(data)
        while view:
            try:
                written = os.write(self._fd, view)
            except BlockingIOError:
                self._wait(select.POLLOUT)
                continue
            except (BrokenPipeError, ConnectionResetError) as error:
                raise ChannelClosed from error
            view = view[written:]

    def _wait(self, events):
        poller = select.poll()
        poller.register(self._fd, events)
        poller.poll()   # POLLHUP/POLLERR also end the wait; the read or write then says why

    def _read_available(self):
        with self._gate.shielded():
            while not self._eof:
                try:
                    chunk, ancillary, _, _ = self._socket.recvmsg(
                        _READ_CHUNK, socket.CMSG_SPACE(4 * _MAX_FDS))
                except BlockingIOError:
                    return
                except ConnectionResetError:
                    chunk, ancillary = b"", []
                fds = _received_fds(ancillary)
                if fds:
                    self._switch(chunk, fds)
                    continue
                if not chunk:
                    self._eof = True
                    return
                self._inbox += chunk
                self._split_frames()
                if len(chunk) < _READ_CHUNK:
                    return  # the socket had no more: another read would only say EAGAIN

    def _switch(self, chunk, fds):
        """A new channel came with the last byte of `chunk` (the marker)."""
        self._inbox += chunk[:-1]
        self._split_frames()
        if self._inbox or self._skip:
            log(f"dropping {len(self._inbox)} bytes of a frame the previous daemon did not finish")
        self._inbox.clear()
        self._skip = 0
        new, rest = fds[0], fds[1:]
        for fd in rest:
            os.close(fd)
        os.dup2(new, self._fd, inheritable=False)  # closes the old channel: the daemon sees EOF
        os.close(new)
        os.set_blocking(self._fd, False)
        self._switched = True

    def _split_frames(self):
        inbox = self._inbox
        while True:
            if self._skip:
                dropped = min(self._skip, len(inbox))
                del inbox[:dropped]
                self._skip -= dropped
                if self._skip:
                    return
            if len(inbox) < 4:
                return
            size = int.from_bytes(inbox[:4], "little")
            if size > MAX_FRAME:
                log(f"ignoring a {size}-byte frame from the daemon (limit {MAX_FRAME} bytes)")
                del inbox[:4]
                self._skip = size
                continue
            if len(inbox) < 4 + size:
                return
            self._frames.append(bytes(inbox[4:4 + size]))
            del inbox[:4 + size]
