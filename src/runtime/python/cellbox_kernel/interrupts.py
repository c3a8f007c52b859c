"""SIGINT handling for a single-threaded kernel.

SIGINT must stop user code with KeyboardInterrupt, but it must never:
  - tear a frame on the channel half-written (the daemon would see garbage and kill us),
  - lose bytes between a read() and the buffer that keeps them,
  - do anything while the kernel is idle and waiting for the next request.

So the handler raises only while "armed" (user code runs) and outside "shielded" sections
(channel I/O); a SIGINT that lands in a shielded section is raised when the section ends.
"""
import contextlib
import signal


class InterruptGate:
    def __init__(self):
        self._armed = False     # user code is running: SIGINT means KeyboardInterrupt
        self._shielded = 0      # depth of channel I/O sections that must not be torn
        self._pending = False   # a SIGINT arrived while shielded

    def install(self):
        """(Re)install our handler; called before each request, as ipykernel resets its own,
        so a handler user code installed does not outlive the request that installed it.
        Unconditionally: code that changed SIGINT in C (a library's sigaction) left Python's
        record of the handler as it was, so comparing with that record would keep it."""
        signal.signal(signal.SIGINT, self._on_sigint)

    def _on_sigint(self, signum, frame):
        if not self._armed:
            return
        if self._shielded:
            self._pending = True
            return
        raise KeyboardInterrupt

    @contextlib.contextmanager
    def armed(self):
        """User code runs inside: SIGINT raises KeyboardInterrupt there."""
        self._pending = False
        self._armed = True
        try:
            yield
        finally:
            self._armed = False
            self._pending = False

    @contextlib.contextmanager
    def shielded(self):
        """Channel I/O runs inside: a SIGINT is held until the I/O is complete."""
        self._shielded += 1
        try:
            yield
        finally:
            self._shielded -= 1
            if not self._shielded and self._pending and self._armed:
                self._pending = False
                raise KeyboardInterrupt
