"""Frames on the channel fd: a u32 little-endian length, then that many bytes (UTF-8 JSON).

The fd is non-blocking: reads take only what is there (so "what is already waiting" can be
collected without blocking), and waits are poll() calls, which a SIGINT can break while user
code waits for input. All reading and writing happens inside InterruptGate.shielded(), so a
KeyboardInterrupt never leaves half a frame written or read bytes dropped.
"""
import collections
import os
import select

from .stdio import log

MAX_FRAME = 64 << 20   # the contract's limit, both directions
_READ_CHUNK = 256 << 10


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

    def send(self, body):
        self.send_all([body])

    def send_all(self, bodies):
        """Frames in order, in one write where they fit: one wake-up of the daemon, not several."""
        frames = []
        for body in bodies:
            if len(body) > MAX_FRAME:
                raise ValueError(f"frame of {len(body)} bytes exceeds the {MAX_FRAME}-byte limit")
            frames += (len(body).to_bytes(4, "little"), body)
        with self._gate.shielded():
            self._write_all(b"".join(frames))

    def receive(self):
        """The next frame's body; waits for one."""
        while not self._frames:
            if self._eof:
                raise ChannelClosed
            self._wait(select.POLLIN)
            self._read_available()
        return self._frames.popleft()

    def receive_ready(self):
        """The bodies of all frames already waiting; never blocks."""
        self._read_available()
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
                    chunk = os.read(self._fd, _READ_CHUNK)
                except BlockingIOError:
                    return
                except ConnectionResetError:
                    chunk = b""
                if not chunk:
                    self._eof = True
                    return
                self._inbox += chunk
                self._split_frames()
                if len(chunk) < _READ_CHUNK:
                    return  # the socket had no more: another read would only say EAGAIN

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
