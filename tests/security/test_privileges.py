"""Class 5: new privileges — setuid binaries (nosuid + no_new_privs), setuid(0), capabilities,
user namespaces and other nested namespaces (unshare, clone flags, clone3), mount, module
loading, bpf, perf, keyrings, io_uring, userfaultfd, and calls of other architectures."""
import os
import signal

import pytest

pytestmark = pytest.mark.cellbox_only

EPERM, ENOSYS = 1, 38

# name, x86-64 number, arguments (harmless even if a call were allowed: bad pointers / flags)
REFUSED_SYSCALLS = [
    ("unshare(CLONE_NEWUSER)", 272, (0x10000000,)),
    ("unshare(CLONE_NEWNS)", 272, (0x00020000,)),
    ("unshare(CLONE_NEWNET)", 272, (0x40000000,)),
    ("setns", 308, (0, 0)),
    ("mount", 165, (0, 0, 0, 0, 0)),
    ("umount2", 166, (0, 2)),
    ("pivot_root", 155, (0, 0)),
    ("chroot", 161, (0,)),
    ("bpf", 321, (5, 0, 0)),
    ("perf_event_open", 298, (0, 0, -1, -1, 0)),
    ("keyctl", 250, (0, 0, 0, 0, 0)),
    ("add_key", 248, (0, 0, 0, 0, 0)),
    ("request_key", 249, (0, 0, 0, 0)),
    ("io_uring_setup", 425, (1, 0)),
    ("io_uring_enter", 426, (0, 0, 0, 0, 0, 0)),
    ("io_uring_register", 427, (0, 0, 0, 0)),
    ("userfaultfd", 323, (0,)),
    ("init_module", 175, (0, 0, 0)),
    ("finit_module", 313, (0, 0, 0)),
    ("delete_module", 176, (0, 0)),
    ("kexec_load", 246, (0, 0, 0, 0)),
    ("kexec_file_load", 320, (0, 0, 0, 0, 0)),
    ("open_by_handle_at", 304, (0, 0, 0)),
    ("reboot", 169, (0, 0, 0, 0)),
    ("swapon", 167, (0, 0)),
    ("swapoff", 168, (0,)),
    ("acct", 163, (0,)),
    ("quotactl", 179, (0, 0, 0, 0)),
    ("fanotify_init", 300, (0, 0)),
    ("ptrace(TRACEME)", 101, (0, 0, 0, 0)),
    ("lookup_dcookie", 212, (0, 0, 0)),
    ("vhangup", 153, ()),
    ("setdomainname", 171, (0, 0)),
    ("fsopen", 430, (0, 0)),
    ("move_mount", 429, (0, 0, 0, 0, 0)),
    ("open_tree", 428, (0, 0, 0)),
    ("mount_setattr", 442, (0, 0, 0, 0, 0)),
]


@pytest.mark.parametrize("name,number,args", REFUSED_SYSCALLS, ids=[n for n, _, _ in REFUSED_SYSCALLS])
def test_syscall_refused_with_eperm(box, hostile, name, number, args):
    got = hostile.json(f"""
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
ctypes.set_errno(0)
rc = libc.syscall(ctypes.c_long({number}), *[ctypes.c_long(a) for a in {args!r}])
_result = [rc, ctypes.get_errno()]
""")
    assert got == [-1, EPERM], f"{name}: rc={got[0]} errno={got[1]} (expected EPERM)"
    box.assert_contained()


def test_clone_with_namespace_flags_refused_and_clone3_enosys(box, hostile):
    got = hostile.json("""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
SIGCHLD = 17
_result = {}
for name, flag in (('NEWUSER', 0x10000000), ('NEWPID', 0x20000000), ('NEWNET', 0x40000000),
                   ('NEWNS', 0x00020000), ('NEWCGROUP', 0x02000000), ('NEWUTS', 0x04000000),
                   ('NEWIPC', 0x08000000)):
    rc = libc.syscall(ctypes.c_long(56), ctypes.c_long(flag | SIGCHLD), 0, 0, 0, 0)
    if rc == 0:
        os._exit(0)  # never reached when the filter works; the child must not run the rest
    _result[name] = [rc, ctypes.get_errno()]
    if rc > 0:
        os.waitpid(rc, 0)
args = (ctypes.c_uint64 * 11)(0x10000000, 0, 0, 0, 17, 0, 0, 0, 0, 0, 0)
rc = libc.syscall(ctypes.c_long(435), args, ctypes.c_long(88))
_result['clone3'] = [rc, ctypes.get_errno()]
if rc == 0:
    os._exit(0)
""")
    for name in ("NEWUSER", "NEWPID", "NEWNET", "NEWNS", "NEWCGROUP", "NEWUTS", "NEWIPC"):
        assert got[name] == [-1, EPERM], f"clone(CLONE_{name}): {got[name]}"
    assert got["clone3"] == [-1, ENOSYS], got["clone3"]
    box.assert_contained()


def test_unshare_and_nsenter_binaries_fail(box, hostile):
    got = hostile.json("""
import subprocess, shutil
_result = {}
for cmd in (['unshare', '-Ur', 'id', '-u'], ['unshare', '-m', 'true'], ['nsenter', '-t', '1', '-m', 'true']):
    if not shutil.which(cmd[0]):
        _result[cmd[0] + ' ' + cmd[1]] = 'absent'; continue
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    _result[cmd[0] + ' ' + cmd[1]] = [r.returncode, r.stdout.strip(), r.stderr.strip()[:200]]
""")
    for cmd, outcome in got.items():
        if outcome == "absent":
            continue
        assert outcome[0] != 0 and outcome[1] != "0", f"{cmd}: {outcome}"
    box.assert_contained()


def test_setuid_root_and_capabilities_refused(box, hostile):
    got = hostile.json("""
import os, ctypes
_result = {}
for name, fn in (('setuid', lambda: os.setuid(0)), ('seteuid', lambda: os.seteuid(0)),
                 ('setresuid', lambda: os.setresuid(0, 0, 0)), ('setgid', lambda: os.setgid(0)),
                 ('setgroups', lambda: os.setgroups([0])), ('chown', lambda: os.chown('/workspace', 0, 0))):
    try:
        fn(); _result[name] = 'done'
    except OSError as e:
        _result[name] = e.errno
libc = ctypes.CDLL(None, use_errno=True)
class Header(ctypes.Structure):
    _fields_ = [('version', ctypes.c_uint32), ('pid', ctypes.c_int)]
class Data(ctypes.Structure):
    _fields_ = [('effective', ctypes.c_uint32), ('permitted', ctypes.c_uint32), ('inheritable', ctypes.c_uint32)]
h = Header(0x20080522, 0); d = (Data * 2)(); d[0].effective = d[0].permitted = 0xffffffff
_result['capset'] = [libc.capset(ctypes.byref(h), d), ctypes.get_errno()]
st = dict(l.split(':', 1) for l in open('/proc/self/status').read().splitlines() if ':' in l)
_result['status'] = {k: st[k].strip() for k in ('CapInh', 'CapPrm', 'CapEff', 'CapBnd', 'CapAmb', 'NoNewPrivs', 'Seccomp', 'Uid', 'Gid', 'Groups')}
_result['uid'] = [os.getuid(), os.geteuid()]
""")
    for name in ("setuid", "seteuid", "setresuid", "setgid", "setgroups", "chown"):
        assert got[name] == EPERM, f"{name}: {got[name]}"
    assert got["capset"] == [-1, EPERM]
    st = got["status"]
    for cap in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert int(st[cap], 16) == 0, (cap, st[cap])
    assert st["NoNewPrivs"] == "1" and st["Seccomp"] == "2", st
    assert st["Groups"] == "", st
    assert got["uid"] == [hostile.uid, hostile.uid] and hostile.uid >= 200000
    box.assert_contained()


def test_setuid_binaries_gain_nothing(box, hostile):
    """su, mount, passwd... are setuid-root on the host; /usr is nosuid in the sandbox and
    no_new_privs is set, so they run as the sandbox user and fail."""
    got = hostile.json("""
import os, stat, subprocess
_result = {'suid': sorted(p for p in ('/usr/bin/su', '/usr/bin/mount', '/usr/bin/passwd', '/usr/bin/chsh',
                                    '/usr/bin/newgrp', '/usr/bin/umount', '/usr/bin/gpasswd')
                        if os.path.exists(p) and os.stat(p).st_mode & stat.S_ISUID)}
_result['usr_opts'] = [l.split()[3] for l in open('/proc/mounts') if l.split()[1] == '/usr'][0]
runs = {}
for cmd in (['su', '-c', 'id -u'], ['mount', '-t', 'tmpfs', 'none', '/tmp'],
            ['umount', '/workspace'], ['passwd', '-d', 'root'], ['chsh', '-s', '/bin/sh', 'root'],
            ['gpasswd', '-a', 'user', 'root']):
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=20, stdin=subprocess.DEVNULL)
        runs[cmd[0]] = [r.returncode, r.stdout.strip()[:200], r.stderr.strip()[:200]]
    except FileNotFoundError:
        pass
_result['runs'] = runs
_result['tmp_mounts'] = [l for l in open('/proc/mounts') if l.split()[1] == '/tmp']
""")
    assert got["suid"], "no setuid binary to try"
    assert {"su", "mount", "umount"} <= set(got["runs"]), got["runs"]
    assert "nosuid" in got["usr_opts"].split(","), got["usr_opts"]
    for cmd, (rc, out, err) in got["runs"].items():
        assert rc != 0, f"{cmd} succeeded in the sandbox: {out!r} {err!r}"
        assert out != "0", f"{cmd} printed uid 0"
    assert len(got["tmp_mounts"]) == 1, got["tmp_mounts"]
    box.assert_contained()


def test_setuid_file_in_workspace_is_inert(box, hostile):
    """A setuid copy in /workspace keeps its owner (the sandbox user) and the volume is nosuid
    on the host as well, so nothing there can become root anywhere."""
    got = hostile.json("""
import os, shutil, stat, subprocess
shutil.copy('/usr/bin/id', '/workspace/suid-id')
os.chmod('/workspace/suid-id', 0o4755)
st = os.stat('/workspace/suid-id')
r = subprocess.run(['/workspace/suid-id', '-u'], capture_output=True, text=True)
_result = {'mode': oct(st.st_mode), 'owner': st.st_uid, 'euid': r.stdout.strip()}
""")
    assert got["owner"] == hostile.uid and got["euid"] == str(hostile.uid), got
    with open("/proc/self/mounts") as f:
        opts = [line.split()[3] for line in f if line.split()[1] == hostile.workspace]
    assert opts and {"nosuid", "nodev"} <= set(opts[0].split(",")), opts
    box.assert_contained()


def test_extended_attributes_only_user_ones_of_own_files(box, hostile):
    """setxattr is allowed (as in Docker's profile, for user.* metadata): without capabilities
    trusted.* and security.* attributes (security.capability would make a file privileged) are
    refused everywhere, and user.* ones on files the sandbox user may not write."""
    got = hostile.json("""
import os
open('/workspace/attrs.txt', 'w').close()
_result = {}
for path in ('/workspace/attrs.txt', '/usr/bin/id', '/etc/passwd'):
    for name in ('trusted.evil', 'security.capability', 'security.evil', 'user.e2b.tag'):
        for call, target in (('setxattr', path), ('fsetxattr', None)):
            try:
                if target:
                    os.setxattr(target, name, b'\\x01\\x00\\x00\\x02' + bytes(16))
                else:
                    fd = os.open(path, os.O_RDONLY)
                    try:
                        os.setxattr(fd, name, b'\\x01\\x00\\x00\\x02' + bytes(16))
                    finally:
                        os.close(fd)
                _result[f'{call} {path} {name}'] = 'set'
            except OSError as e:
                _result[f'{call} {path} {name}'] = e.errno
""")
    for key, outcome in got.items():
        if key.startswith("setxattr /workspace/attrs.txt user.") or key.startswith("fsetxattr /workspace/attrs.txt user."):
            assert outcome == "set", f"{key}: {outcome}"
        else:
            assert outcome != "set", f"{key}: {outcome}"
    assert "security.capability" not in os.listxattr("/usr/bin/id")
    box.assert_contained()


def test_device_nodes_cannot_be_created(box, hostile):
    got = hostile.json("""
import os, stat
_result = {}
for name, mode, dev in (('sda', stat.S_IFBLK | 0o666, os.makedev(8, 0)),
                        ('mem', stat.S_IFCHR | 0o666, os.makedev(1, 1)),
                        ('kmsg', stat.S_IFCHR | 0o666, os.makedev(1, 11))):
    for d in ('/workspace', '/tmp', '/dev/shm'):
        try:
            os.mknod(f'{d}/{name}', mode, dev); _result[f'{d}/{name}'] = 'made'
        except OSError as e:
            _result[f'{d}/{name}'] = e.errno
""")
    for path, outcome in got.items():
        assert outcome in (EPERM, 13), f"mknod {path}: {outcome}"
    box.assert_contained()


def test_i386_int80_and_x32_syscalls_kill_the_caller(box, hostile):
    """Calls through another ABI: int 0x80 (i386) and an x32-numbered syscall. The calling
    process is killed (SIGSYS from the filter; SIGSEGV where the host kernel has no i386
    emulation at all) and the call never runs; the kernel that started it survives."""
    got = hostile.json(r"""
import subprocess, sys
i386 = '''
import ctypes, mmap
buf = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
buf.write(bytes([0xb8, 0x14, 0, 0, 0, 0xcd, 0x80, 0xc3]))  # mov eax, 20 (getpid); int 0x80; ret
f = ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(buf)))
print('returned', f(), flush=True)
'''
x32 = "import ctypes; print('returned', ctypes.CDLL(None).syscall(0x40000000 | 39), flush=True)"
_result = {}
for name, code in (('i386', i386), ('x32', x32)):
    r = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, timeout=30)
    _result[name] = [r.returncode, r.stdout]
""")
    assert got["x32"] == [-signal.SIGSYS, ""], got
    assert got["i386"][1] == "" and got["i386"][0] in (-signal.SIGSYS, -signal.SIGSEGV), got
    hostile.ok("print('survived')")
    box.assert_contained()


def test_personality_only_harmless_values(box, hostile):
    got = hostile.json("""
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
_result = {}
for name, value in (('READ_IMPLIES_EXEC', 0x0400000), ('ADDR_NO_RANDOMIZE', 0x0040000),
                    ('query', 0xffffffff)):
    ctypes.set_errno(0)
    _result[name] = [libc.personality(ctypes.c_ulong(value)), ctypes.get_errno()]
""")
    assert got["READ_IMPLIES_EXEC"] == [-1, EPERM], got
    assert got["ADDR_NO_RANDOMIZE"] == [-1, EPERM], got
    assert got["query"][0] >= 0, got
    box.assert_contained()
