"""cellbox-kernel --language=... (bash, javascript, typescript) driven the way cellboxd drives it.

Like kernel_process.KernelProcess, but in a session of its own: cellboxd interrupts a kernel by
sending SIGINT to its whole process group (the kernel's children included), and a test can only
do the same without hitting pytest if the kernel leads its own group.
"""
import glob
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid

from helpers.environment import kernel_environ
from kernel_process import BUILD, KERNEL, KernelProcess

SHARE_DIR = os.path.join(BUILD, "share", "cellbox")


class LanguageKernel(KernelProcess):
    def __init__(self, args, env=None):  # pylint: disable=super-init-not-called
        ours, theirs = socket.socketpair()
        self.home = tempfile.mkdtemp(prefix="cellbox-test-kernel-")
        self.started_at = time.monotonic()
        self.proc = subprocess.Popen(
            [KERNEL] + args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, env=env if env is not None else kernel_environ(self.home),
            close_fds=False, start_new_session=True,
            preexec_fn=lambda: os.dup2(theirs.fileno(), 3))
        theirs.close()
        self.sock = ours
        self.session = uuid.uuid4().hex
        self._inbox = b""
        self.output = {"stdout": b"", "stderr": b""}
        for pipe in (self.proc.stdout, self.proc.stderr):
            os.set_blocking(pipe.fileno(), False)

    def interrupt(self):
        """SIGINT to the kernel's process group, as cellboxd sends it."""
        os.killpg(self.proc.pid, signal.SIGINT)

    def wait_process(self, name, timeout=10.0):
        """Waits until a process named `name` runs in the kernel's group: a command a cell
        started has begun (the interrupt then reaches it directly; one sent while bash is still
        forking it is carried to it by the kernel's sweep, which
        test_interrupt_while_the_shell_starts_a_program_still_ends_the_cell tests)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for pid in filter(str.isdigit, os.listdir("/proc")):
                try:
                    with open(f"/proc/{pid}/stat") as stat:
                        fields = stat.read().rsplit(")", 1)[1].split()
                    with open(f"/proc/{pid}/comm") as comm:
                        command = comm.read().strip()
                except OSError:
                    continue
                if int(fields[2]) == self.proc.pid and command == name:
                    return
            time.sleep(0.02)
        raise AssertionError(f"no {name} process appeared in the kernel's group")

    def close(self):
        """Ends the kernel and every process left in its group (its own session: only what this
        test started), then what KernelProcess.close does."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        # A bash kernel killed here could not remove its cell directory (named for its pid).
        for directory in glob.glob(f"/tmp/cellbox-bash-{self.proc.pid}-*"):
            shutil.rmtree(directory, ignore_errors=True)
        super().close()


def started(args, env=None):
    """A language kernel that has said `starting`, closed after use: `yield from` it."""
    k = LanguageKernel(args, env)
    try:
        first = k.wait_starting()
        assert first["header"]["msg_type"] == "status", first
        assert first["content"] == {"execution_state": "starting"}, first
        yield k
    finally:
        k.close()
