"""Class 2: writing outside the workspace — /usr, /etc, the daemon's binary (/opt/cellbox,
/proc/self/exe and /proc/1/exe: the CVE-2019-5736 class), /proc/sys, /proc/sysrq-trigger,
the root, /dev. Each attack must fail with a specific error and leave the host's file as it
was (HostState compares hashes after each test)."""
import json
import os
import subprocess
import sys

import pytest

from helpers.daemon import built
from seclib import PWN, sha256

pytestmark = pytest.mark.cellbox_only

EROFS, EACCES, EPERM, ENOENT, ETXTBSY = 30, 13, 1, 2, 26


def attempt_writes(kernel, paths, mode="w"):
    return kernel.json(f"""
import os
_result = {{}}
for p in {list(paths)!r}:
    try:
        with open(p, {mode!r}) as f:
            f.write('pwned\\n')
        _result[p] = 'written'
    except OSError as e:
        _result[p] = e.errno
""")


def test_write_into_usr_fails(box, hostile):
    got = attempt_writes(hostile, [f"/usr/bin/{PWN}", f"/usr/lib/{PWN}", f"/usr/local/bin/{PWN}",
                                   f"/bin/{PWN}", f"/lib/{PWN}", "/usr/bin/python3"], mode="a")
    for p, outcome in got.items():
        assert outcome in (EROFS, EACCES), f"{p}: {outcome}"
    assert not os.path.exists(f"/usr/bin/{PWN}")
    box.assert_contained()


def test_write_into_etc_fails(box, hostile):
    got = attempt_writes(hostile, ["/etc/passwd", "/etc/hosts", f"/etc/{PWN}", "/etc/ld.so.preload",
                                   "/etc/ssl/certs/ca-certificates.crt", "/etc/resolv.conf"], mode="a")
    for p, outcome in got.items():
        assert outcome in (EROFS, EACCES), f"{p}: {outcome}"
    # also replacing it by rename and by deleting it
    got = hostile.json("""
import os
_result = {}
open('/workspace/passwd.new', 'w').write('root::0:0::/:/bin/sh\\n')
for name, fn in (('rename', lambda: os.rename('/workspace/passwd.new', '/etc/passwd')),
                 ('unlink', lambda: os.unlink('/etc/passwd')),
                 ('chmod', lambda: os.chmod('/etc/passwd', 0o666)),
                 ('symlink', lambda: os.symlink('/workspace/passwd.new', '/etc/x'))):
    try:
        fn(); _result[name] = 'done'
    except OSError as e:
        _result[name] = e.errno
""")
    assert got["rename"] in (18, EROFS, EACCES), got  # EXDEV: another filesystem
    assert got["unlink"] in (EROFS, EACCES) and got["chmod"] in (EROFS, EPERM, EACCES), got
    assert got["symlink"] in (EROFS, EACCES), got
    box.assert_contained()


def test_python_and_pip_configuration_cannot_be_changed(box, hostile):
    """A sandbox's /etc/pip.conf is generated, and its sitecustomize is cellbox's file mounted
    over Debian's (no network): a cell can neither rewrite, remove nor unmount them, and the
    host's files behind them keep their content."""
    host_files = ("/etc/python3.11/sitecustomize.py",
                  built("share", "cellbox", "python", "no_network_sitecustomize.py"))
    before = {p: sha256(p) for p in host_files}
    got = attempt_writes(hostile, ["/etc/pip.conf", "/etc/python3.11/sitecustomize.py",
                                   "/usr/lib/python3.11/sitecustomize.py",
                                   "/opt/cellbox/share/cellbox/python/no_network_sitecustomize.py"],
                         mode="a")
    for p, outcome in got.items():
        assert outcome in (EROFS, EACCES), f"{p}: {outcome}"
    got = hostile.json("""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
_result = {}
try:
    os.unlink('/etc/pip.conf'); _result['unlink'] = 'done'
except OSError as e:
    _result['unlink'] = e.errno
rc = libc.umount2(b'/etc/python3.11/sitecustomize.py', 2)  # MNT_DETACH
_result['umount'] = 'done' if rc == 0 else ctypes.get_errno()
_result['still_cellbox'] = 'cellbox' in open('/etc/python3.11/sitecustomize.py').read()
""")
    assert got["unlink"] in (EROFS, EACCES) and got["umount"] == EPERM, got
    assert got["still_cellbox"] is True, got
    assert {p: sha256(p) for p in host_files} == before
    box.assert_contained()


def test_overwrite_daemon_binary_in_opt_cellbox(box, hostile):
    before = sha256(box.daemon.binary)
    got = attempt_writes(hostile, ["/opt/cellbox/bin/cellboxd", "/opt/cellbox/bin/cellbox-kernel",
                                   f"/opt/cellbox/bin/{PWN}",
                                   "/opt/cellbox/share/cellbox/python/cellbox_kernel/kernel.py"], mode="r+")
    for p, outcome in got.items():
        assert outcome in (EROFS, EACCES, ENOENT, ETXTBSY), f"{p}: {outcome}"
    assert sha256(box.daemon.binary) == before
    box.assert_contained()


def test_overwrite_proc_self_exe_and_daemon_exe(box, fresh):
    """CVE-2019-5736: open the running binary through /proc/<pid>/exe and write to it. The
    kernel's own binary (/proc/self/exe) and pid 1's (a fork of cellboxd: the daemon's binary)
    must both be refused."""
    k = fresh()
    kernel_binary = os.path.join(os.path.dirname(box.daemon.binary), "cellbox-kernel")
    before = (sha256(box.daemon.binary), sha256(kernel_binary))
    got = k.json("""
import os
_result = {}
for p in ('/proc/self/exe', '/proc/1/exe', '/proc/2/exe'):
    for mode in (os.O_WRONLY, os.O_RDWR, os.O_WRONLY | os.O_TRUNC):
        try:
            fd = os.open(p, mode)
            os.write(fd, b'\\x7fELFpwned')
            os.close(fd)
            _result[f'{p}:{mode}'] = 'written'
        except OSError as e:
            _result[f'{p}:{mode}'] = e.errno
try:
    _result['pid1-readlink'] = os.readlink('/proc/1/exe')
except OSError as e:
    _result['pid1-readlink'] = e.errno
""")
    for key, outcome in got.items():
        if key == "pid1-readlink":
            assert outcome == EACCES, f"the sandbox can resolve pid 1's binary: {outcome}"
        else:
            assert outcome in (EACCES, ETXTBSY, EROFS, EPERM), f"{key}: {outcome}"
    assert (sha256(box.daemon.binary), sha256(kernel_binary)) == before
    k.ok("print('still alive')")
    box.assert_contained()


def test_write_proc_sys(box, hostile):
    got = attempt_writes(hostile, ["/proc/sys/kernel/hostname", "/proc/sys/kernel/core_pattern",
                                   "/proc/sys/kernel/modprobe", "/proc/sys/vm/drop_caches",
                                   "/proc/sys/net/ipv4/ip_forward", "/proc/sys/fs/binfmt_misc/register"])
    for p, outcome in got.items():
        assert outcome in (EROFS, EACCES, ENOENT), f"{p}: {outcome}"
    assert got["/proc/sys/kernel/core_pattern"] in (EROFS, EACCES)
    assert got["/proc/sys/kernel/hostname"] in (EROFS, EACCES)
    box.assert_contained()


def test_sysrq_trigger_is_absent_or_masked(box, hostile):
    got = hostile.json("""
import os, stat
_result = {}
try:
    st = os.stat('/proc/sysrq-trigger')
    _result['stat'] = [stat.S_ISCHR(st.st_mode), os.major(st.st_rdev), os.minor(st.st_rdev)]
except OSError as e:
    _result['stat'] = e.errno
try:
    with open('/proc/sysrq-trigger', 'w') as f:
        f.write('h')
    _result['write'] = 'written'
except OSError as e:
    _result['write'] = e.errno
""")
    if os.path.exists("/proc/sysrq-trigger"):
        # masked: /dev/null bound over it (char 1:3), a write goes nowhere
        assert got["stat"] == [True, 1, 3], got
    else:
        # this host kernel has no sysrq-trigger, and the sandbox cannot create one
        assert got["stat"] == ENOENT and got["write"] in (ENOENT, EACCES, EROFS), got
    box.assert_contained()


def test_write_root_dev_and_opt(box, hostile):
    got = attempt_writes(hostile, [f"/{PWN}", f"/dev/{PWN}", f"/opt/{PWN}", f"/proc/{PWN}",
                                   f"/root/{PWN}", f"/home/{PWN}"])
    for p, outcome in got.items():
        assert outcome in (EROFS, EACCES, ENOENT), f"{p}: {outcome}"
    got = hostile.json(f"""
import os
_result = {{}}
for p in ('/{PWN}', '/usr/{PWN}', '/dev/{PWN}'):
    try:
        os.mkdir(p); _result[p] = 'made'
    except OSError as e:
        _result[p] = e.errno
""")
    for p, outcome in got.items():
        assert outcome in (EROFS, EACCES), f"{p}: {outcome}"
    box.assert_contained()


def test_tmp_and_dev_shm_writes_stay_inside(box, hostile):
    """Writable places besides /workspace are the sandbox's own tmpfs: nothing reaches the host's
    /tmp or /dev/shm."""
    got = hostile.json(f"""
import os
open('/tmp/{PWN}', 'w').write('x')
open('/dev/shm/{PWN}', 'w').write('x')
_result = [os.path.exists('/tmp/{PWN}'), os.path.exists('/dev/shm/{PWN}')]
""")
    assert got == [True, True]
    assert not os.path.exists(f"/tmp/{PWN}") and not os.path.exists(f"/dev/shm/{PWN}")
    hostile.ok(f"import os; os.remove('/tmp/{PWN}'); os.remove('/dev/shm/{PWN}')")
    box.assert_contained()


def test_remount_readonly_paths_writable(box, hostile):
    got = hostile.json("""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
MS_REMOUNT, MS_BIND = 32, 4096
_result = {}
for target in (b'/usr', b'/etc', b'/', b'/opt/cellbox', b'/proc/sys'):
    rc = libc.mount(None, target, None, MS_REMOUNT | MS_BIND, None)
    _result[target.decode()] = [rc, ctypes.get_errno()]
""")
    for target, (rc, err) in got.items():
        assert rc == -1 and err == EPERM, f"remount {target}: rc={rc} errno={err}"
    box.assert_contained()


def test_guard_detects_an_unsandboxed_process():
    """The suite's own guard: the proof, run in an ordinary host process (the proof code is
    harmless), must be rejected, so a daemon that forgot the sandbox fails the run."""
    from seclib import PROOF_CODE, PROOF_MARK, proof_problems
    out = subprocess.run([sys.executable, "-c", PROOF_CODE], capture_output=True, text=True,
                         timeout=30).stdout
    proof = json.loads([x for x in out.splitlines() if x.startswith(PROOF_MARK)][0][len(PROOF_MARK):])
    problems = proof_problems(proof)
    assert any("mount namespace" in p for p in problems), problems
    assert any("Seccomp" in p for p in problems), problems
