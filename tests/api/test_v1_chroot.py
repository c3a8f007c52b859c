"""A daemon run under chroot(2), as some build farms and service managers run services, rather
than in a mount namespace whose root it is: its sandboxes, their commands and their extra
contexts work as usual. (A joined process used to land on the mount namespace's root, which a
chroot never moved: "cannot change to the working directory: /workspace".)"""
import os
import subprocess
import tempfile

import pytest

from helpers.daemon import Daemon, serve


def mount_point_of(path):
    path = os.path.realpath(path)
    while not os.path.ismount(path):
        path = os.path.dirname(path)
    return path


class ChrootedDaemon(Daemon):
    """cellboxd under `chroot` into a bind of the host's root file system, with /proc, /sys and
    /dev and the file systems that hold its binary, its temp dir and /usr bound in too: the same
    paths inside. Binds of chosen mounts, not of the whole tree: the host's other mounts (other
    work's among them) are never copied. Mounts made inside reach nothing outside."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.root = tempfile.mkdtemp(prefix="cellbox-test-chroot-")
        try:
            self._bind("/", "--bind")
            for path in ("/proc", "/sys", "/dev"):
                self._bind(path, "--rbind")
            for path in {mount_point_of(p) for p in (self.binary, self.tmp, "/usr")} - {"/"}:
                self._bind(path, "--bind")
        except BaseException:
            self._unbind()
            raise

    def _bind(self, path, how):
        target = self.root + path if path != "/" else self.root
        subprocess.run(["mount", how, path, target], check=True)
        subprocess.run(["mount", "--make-rslave", target], check=True)

    def _unbind(self):
        subprocess.run(["umount", "-R", "-l", self.root], check=False, stderr=subprocess.DEVNULL)
        os.rmdir(self.root)

    def argv(self):
        return ["/usr/sbin/chroot", self.root] + super().argv()

    def finish(self):
        try:
            return super().finish()
        finally:
            self._unbind()


@pytest.fixture(scope="module")
def daemon():
    server = ChrootedDaemon()
    try:
        server.start()
    except BaseException:
        server.finish()
        raise
    yield from serve(server)


def test_commands_and_contexts_of_a_chrooted_daemon(v1, fresh):
    sid = fresh["id"]
    assert v1.value(sid, "import os; os.getcwd()") == "'/workspace'"
    v1.execute(sid, "open('/workspace/mark', 'w').write('m')")
    ev = v1.command(sid, "pwd; cat mark; echo; ls /")
    assert ev.stdout.splitlines()[:2] == ["/workspace", "m"], ev
    assert "opt" in ev.stdout.split() and os.path.basename(v1.daemon.root) not in ev.stdout, ev
    r = v1.post(f"v1/sandboxes/{sid}/contexts", json={"cwd": "/tmp"})
    assert r.status_code == 201, r.text
    context = r.json()["id"]
    assert v1.value(sid, "import os; os.getcwd(), open('/workspace/mark').read()",
                    context_id=context) == "('/tmp', 'm')"
