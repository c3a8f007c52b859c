"""Class 6: leaked file descriptors (CVE-2024-21626 class) — only the sandbox's own fds are
open, none points to a host path or a daemon socket.
Class 7: symlink and race tricks against what the daemon later touches in the workspace
(deletion, restart): the daemon never follows a link out of the sandbox."""
import os
import stat

import pytest

from seclib import sha256, wait_until

pytestmark = pytest.mark.cellbox_only

FD_LISTING = r"""
import os, stat
_result = {}
for name in os.listdir('/proc/self/fd'):
    fd = int(name)
    try:
        target = os.readlink(f'/proc/self/fd/{fd}')
        st = os.fstat(fd)
    except OSError:
        continue  # the listing's own descriptor, closed by now
    entry = {'target': target, 'mode': st.st_mode, 'dev': st.st_dev, 'ino': st.st_ino}
    if target.startswith('/'):
        try:
            pst = os.stat(target)
            entry['same'] = (pst.st_dev, pst.st_ino) == (st.st_dev, st.st_ino)
        except OSError as e:
            entry['same'] = e.errno
    _result[fd] = entry
"""


def test_only_the_sandbox_fds_are_open(box, fresh):
    k = fresh()
    fds = {int(fd): e for fd, e in k.json(FD_LISTING).items()}
    assert fds[0]["target"] == "/dev/null"
    assert fds[1]["target"].startswith("pipe:") and fds[2]["target"].startswith("pipe:")
    assert fds[3]["target"].startswith("socket:")
    assert max(fds) < 16, f"unexpected high descriptors: {fds}"
    for fd, e in fds.items():
        t = e["target"]
        if t.startswith("/"):
            # a path must be one the sandbox itself can reach (a host fd shows a path that does
            # not resolve to the same file inside)
            assert e["same"] is True, f"fd {fd} -> {t} is not a file of the sandbox: {e}"
            assert not stat.S_ISDIR(e["mode"]), f"fd {fd} is a directory: {t}"
            assert t.startswith(("/dev/", "/workspace", "/tmp", "/usr/", "/opt/cellbox/")), f"fd {fd} -> {t}"
        else:
            assert t.split(":")[0] in ("pipe", "socket", "anon_inode"), f"fd {fd} -> {t}"
    box.assert_contained()


def test_kernel_fds_share_nothing_with_the_daemon_but_its_pipes(box, fresh):
    """Seen from the host: the kernel's sockets are not the daemon's (listening socket, client
    connections), its only pipes are its stdout/stderr, and pid 1 keeps no descriptor at all."""
    k = fresh()
    kpid, sup = k.kernel_host_pid(), k.supervisor_host_pid()
    assert kpid and sup, k.host_pids()

    def targets(pid):
        out = {}
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                out[int(fd)] = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                pass
        return out

    daemon_fds = targets(box.daemon.pid)
    kernel_fds = targets(kpid)
    daemon_sockets = {t for t in daemon_fds.values() if t.startswith("socket:")}
    kernel_sockets = {fd: t for fd, t in kernel_fds.items() if t.startswith("socket:")}
    assert list(kernel_sockets) == [3], f"the kernel holds sockets besides its channel: {kernel_fds}"
    assert not set(kernel_sockets.values()) & daemon_sockets, "the kernel holds one of the daemon's sockets"
    kernel_pipes = {fd: t for fd, t in kernel_fds.items() if t.startswith("pipe:")}
    assert sorted(kernel_pipes) == [1, 2], kernel_fds
    for fd, t in kernel_fds.items():
        if t.startswith("/"):
            assert t in ("/dev/null", "/dev/urandom", "/dev/random"), f"kernel fd {fd} -> {t} (a host path)"
    assert targets(sup) == {}, f"the sandbox's pid 1 holds descriptors: {targets(sup)}"
    box.assert_contained()


def test_no_fd_reaches_the_host_through_proc(box, hostile):
    """A classic runc escape: /proc/self/fd/N or /proc/1/fd/N of a host directory. Nothing
    under /proc/<pid>/fd, cwd or root of a visible process leads outside the sandbox root."""
    got = hostile.json(r"""
import os
_result = {}
for pid in [p for p in os.listdir('/proc') if p.isdigit()] + ['self']:
    for link in ('cwd', 'root', 'exe'):
        try:
            _result[f'{pid}/{link}'] = os.readlink(f'/proc/{pid}/{link}')
        except OSError as e:
            _result[f'{pid}/{link}'] = e.errno
try:
    _result['root-ls'] = sorted(os.listdir('/proc/self/root'))
except OSError as e:
    _result['root-ls'] = e.errno
_result['slash-ls'] = sorted(os.listdir('/'))
""")
    assert got["self/cwd"] == "/workspace" and got["self/root"] == "/", got
    assert got["root-ls"] == got["slash-ls"], got
    assert got["1/cwd"] == 13 and got["1/root"] == 13 and got["1/exe"] == 13, got
    box.assert_contained()


def test_fd_passing_from_pid1_impossible(box, hostile):
    """Descriptors cannot be received from pid 1 (it holds none, and pidfd_getfd is refused);
    /proc/1/fd cannot be listed."""
    got = hostile.json("""
import os
try:
    _result = os.listdir('/proc/1/fd')
except OSError as e:
    _result = e.errno
""")
    assert got == 13, got
    box.assert_contained()


def test_symlinks_to_host_secrets_survive_delete(box, fresh):
    """Links planted in /workspace pointing at /etc/shadow, /etc, / and the daemon's data dir:
    deleting the kernel removes the workspace without following any of them."""
    k = fresh()
    shadow, passwd = sha256("/etc/shadow"), sha256("/etc/passwd")
    data_dir = box.daemon.data_dir
    canary = box.host.canary_path
    k.ok(f"""
import os
for name, target in (('shadow', '/etc/shadow'), ('etc', '/etc'), ('root', '/'),
                     ('data', {data_dir!r}), ('canary', {canary!r}),
                     ('outside', {os.path.dirname(canary)!r}), ('up', '..'), ('loop', 'loop')):
    os.symlink(target, f'/workspace/{{name}}')
os.mkdir('/workspace/d')
os.symlink('/etc/passwd', '/workspace/d/passwd')
os.symlink({os.path.join(box.neighbour.workspace, 'neighbour.txt')!r}, '/workspace/d/nb')
""")
    ws = k.workspace
    assert os.path.islink(os.path.join(ws, "shadow"))
    r = k.delete()
    assert r.status_code == 204
    wait_until(lambda: not os.path.exists(ws), timeout=20, message="workspace removed")
    assert sha256("/etc/shadow") == shadow and sha256("/etc/passwd") == passwd
    assert os.path.isfile(canary) and os.path.isdir(data_dir)
    assert os.path.isdir(os.path.join(data_dir, "workspaces"))
    box.assert_contained()


def test_symlink_to_another_kernels_workspace(box, fresh):
    """A link to the neighbour's workspace by its host path resolves inside the sandbox to
    nothing; after the kernel is deleted the neighbour's files are intact."""
    k = fresh()
    target = os.path.join(box.neighbour.workspace, "neighbour.txt")
    got = k.json(f"""
import os
os.symlink({target!r}, '/workspace/nb')
os.symlink({box.neighbour.workspace!r}, '/workspace/nbdir')
_result = {{}}
for p in ('/workspace/nb', '/workspace/nbdir/neighbour.txt'):
    try:
        _result[p] = open(p).read()
    except OSError as e:
        _result[p] = e.errno
try:
    open('/workspace/nb', 'w').write('overwritten'); _result['write'] = 'written'
except OSError as e:
    _result['write'] = e.errno
""")
    assert got == {"/workspace/nb": 2, "/workspace/nbdir/neighbour.txt": 2, "write": 2}, got
    assert k.delete().status_code == 204
    with open(target) as f:
        assert f.read() == box.neighbour_value
    box.assert_contained()


def test_hardlinks_out_of_workspace_impossible(box, hostile):
    """Hard links to host-side files (to have the daemon or a host tool modify them through the
    workspace) fail: the workspace is a filesystem of its own."""
    got = hostile.json("""
import os
_result = {}
for src in ('/etc/passwd', '/usr/bin/python3', '/opt/cellbox/bin/cellboxd', '/tmp'):
    try:
        os.link(src, '/workspace/hl-' + os.path.basename(src)); _result[src] = 'linked'
    except OSError as e:
        _result[src] = e.errno
""")
    for src, outcome in got.items():
        assert outcome in (18, 1, 13), f"link {src}: {outcome}"  # EXDEV / EPERM / EACCES
    box.assert_contained()


def test_restart_with_planted_links_and_deep_tree(box, fresh):
    """Restart keeps the workspace: symlink loops, a FIFO, a deep directory tree and a link
    over the kernel's own dot-directories do not trip the daemon, and the host is untouched."""
    k = fresh()
    k.ok("""
import os
os.mkfifo('/workspace/fifo')
os.symlink('/workspace/l2', '/workspace/l1'); os.symlink('/workspace/l1', '/workspace/l2')
p = '/workspace/deep'
for i in range(300):
    p = os.path.join(p, 'd')
os.makedirs(p)
os.symlink('/etc/shadow', '/workspace/.ipython')
os.symlink('/etc', '/workspace/.cache')
""")
    k.restart()
    got = k.json("""
import os
_result = sorted(os.listdir('/workspace'))
""")
    assert {"fifo", "l1", "l2", "deep", ".ipython", ".cache"} <= set(got), got
    assert k.delete().status_code == 204
    box.assert_contained()
