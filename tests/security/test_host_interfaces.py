"""Class 9: cgroup escapes (release_agent, CVE-2022-0492 class): no cgroupfs visible, none can
be mounted, the cgroup namespace hides the host's hierarchy.
Class 10: terminal injection (TIOCSTI), hostname and time changes, kernel log reads
(dmesg, /proc/kmsg), host kernel views (/proc/kcore, kallsyms, keys, timer_list)."""
import os
import socket
import time

import pytest

from seclib import sha256

pytestmark = pytest.mark.cellbox_only

EPERM, EROFS, EACCES, ENOENT = 1, 30, 13, 2


# ------------------------------------------------------------------ cgroups

def test_no_cgroupfs_or_sysfs_visible(box, hostile):
    got = hostile.json("""
import os
_result = {'sys': os.path.exists('/sys'), 'fs_cgroup': os.path.exists('/sys/fs/cgroup'),
           'cgroup_mounts': [l for l in open('/proc/mounts') if l.split()[2] in ('cgroup', 'cgroup2', 'sysfs')],
           'self_cgroup': open('/proc/self/cgroup').read().splitlines()}
found = []
for top in ('/', ):
    for root, dirs, files in os.walk(top):
        dirs[:] = [d for d in dirs if os.path.join(root, d) not in ('/proc', '/usr')]
        if 'release_agent' in files or 'notify_on_release' in files:
            found.append(root)
_result['release_agent'] = found
""", timeout=120)
    assert got["sys"] is False and got["fs_cgroup"] is False, got
    assert got["cgroup_mounts"] == [], got
    assert got["release_agent"] == [], got
    # the cgroup namespace is rooted at the sandbox's own cgroup: every path is "/"
    assert got["self_cgroup"] and all(line.endswith(":/") for line in got["self_cgroup"]), got["self_cgroup"]
    box.assert_contained()


def test_mounting_cgroupfs_refused(box, hostile):
    release_agents = {p: sha256(p) for p in ("/sys/fs/cgroup/memory/release_agent",
                                             "/sys/fs/cgroup/pids/release_agent",
                                             "/sys/fs/cgroup/cpu/release_agent")}
    got = hostile.json("""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
os.makedirs('/tmp/cg', exist_ok=True)
_result = {}
for fstype, opts in ((b'cgroup', b'memory'), (b'cgroup', b'rdma'), (b'cgroup2', None), (b'sysfs', None),
                     (b'proc', None), (b'tmpfs', None)):
    rc = libc.mount(fstype, b'/tmp/cg', fstype, 0, opts)
    _result[(fstype + b':' + (opts or b'')).decode()] = [rc, ctypes.get_errno()]
_result['listing'] = os.listdir('/tmp/cg')
""")
    listing = got.pop("listing")
    for what, outcome in got.items():
        assert outcome == [-1, EPERM], f"mount {what}: {outcome}"
    assert listing == []
    assert {p: sha256(p) for p in release_agents} == release_agents
    box.assert_contained()


def test_cgroup_limits_cannot_be_raised_from_inside(box, fresh):
    """The sandbox cannot reach its own cgroup's files (to lift memory/pids limits) by any path."""
    k = fresh(limits={"pids": 48})
    got = k.json("""
import os, glob
_result = {'candidates': glob.glob('/sys/fs/cgroup/**/pids.max', recursive=True) +
                         glob.glob('/proc/*/root/sys/fs/cgroup/*', recursive=False)}
""")
    assert got["candidates"] == [], got
    box.assert_contained()


# ------------------------------------------------------------------ terminal injection

def test_tiocsti_refused_on_every_terminal(box, hostile):
    got = hostile.json("""
import ctypes, fcntl, os, pty, termios
libc = ctypes.CDLL(None, use_errno=True)
_result = {}
for fd in (0, 1, 2):
    try:
        fcntl.ioctl(fd, termios.TIOCSTI, b'x'); _result[f'fd{fd}'] = 'injected'
    except OSError as e:
        _result[f'fd{fd}'] = e.errno
master, slave = pty.openpty()
try:
    fcntl.ioctl(slave, termios.TIOCSTI, b'x'); _result['pty'] = 'injected'
except OSError as e:
    _result['pty'] = e.errno
# CVE-2019-10063: high bits set in the 64-bit request must not smuggle TIOCSTI past the filter
for name, request in (('hi32', (1 << 32) | termios.TIOCSTI), ('hi63', (1 << 63) | termios.TIOCSTI)):
    c = ctypes.c_char(b'x')
    rc = libc.syscall(16, slave, ctypes.c_ulong(request), ctypes.byref(c))
    _result[name] = [rc, ctypes.get_errno()]
try:
    fd = os.open('/dev/tty', os.O_RDWR); _result['dev_tty'] = 'opened'; os.close(fd)
except OSError as e:
    _result['dev_tty'] = e.errno
_result['sid_is_own'] = os.getsid(0) != 0
os.close(master); os.close(slave)
""")
    for key in ("fd0", "fd1", "fd2", "pty"):
        assert got[key] == EPERM, f"TIOCSTI on {key}: {got[key]}"
    assert got["hi32"] == [-1, EPERM] and got["hi63"] == [-1, EPERM], got
    assert got["dev_tty"] == 6, f"the sandbox has a controlling terminal: {got['dev_tty']}"  # ENXIO
    box.assert_contained()


def test_ordinary_pty_ioctls_still_work(box, hostile):
    """The TIOCSTI rule must not break terminals: window size ioctls on a pty work."""
    got = hostile.json("""
import fcntl, pty, struct, termios, os
m, s = pty.openpty()
fcntl.ioctl(s, termios.TIOCSWINSZ, struct.pack('HHHH', 40, 100, 0, 0))
_result = list(struct.unpack('HHHH', fcntl.ioctl(s, termios.TIOCGWINSZ, b'\\0' * 8)))
os.close(m); os.close(s)
""")
    assert got == [40, 100, 0, 0]
    box.assert_contained()


# ------------------------------------------------------------------ hostname and time

def test_hostname_change_refused(box, hostile):
    host_name = socket.gethostname()
    got = hostile.json("""
import ctypes, socket, subprocess
libc = ctypes.CDLL(None, use_errno=True)
_result = {'before': socket.gethostname()}
try:
    socket.sethostname('pwned'); _result['sethostname'] = 'done'
except OSError as e:
    _result['sethostname'] = e.errno
_result['setdomainname'] = [libc.setdomainname(b'pwned', 5), ctypes.get_errno()]
try:
    open('/proc/sys/kernel/hostname', 'w').write('pwned'); _result['proc'] = 'written'
except OSError as e:
    _result['proc'] = e.errno
r = subprocess.run(['hostname', 'pwned'], capture_output=True, text=True)
_result['cmd'] = r.returncode
_result['after'] = socket.gethostname()
""")
    assert got["before"] == "cellbox" and got["after"] == "cellbox", got
    assert got["sethostname"] == EPERM and got["setdomainname"] == [-1, EPERM], got
    assert got["proc"] in (EROFS, EACCES) and got["cmd"] != 0, got
    assert socket.gethostname() == host_name
    box.assert_contained()


def test_time_change_refused(box, hostile):
    before = time.time()
    got = hostile.json("""
import ctypes, subprocess, time
libc = ctypes.CDLL(None, use_errno=True)
_result = {}
try:
    time.clock_settime(time.CLOCK_REALTIME, 0); _result['clock_settime'] = 'done'
except OSError as e:
    _result['clock_settime'] = e.errno
class timeval(ctypes.Structure):
    _fields_ = [('sec', ctypes.c_long), ('usec', ctypes.c_long)]
_result['settimeofday'] = [libc.settimeofday(ctypes.byref(timeval(0, 0)), None), ctypes.get_errno()]
class timex(ctypes.Structure):
    _fields_ = [('modes', ctypes.c_uint), ('pad', ctypes.c_byte * 204)]
t = timex(); t.modes = 0x0100 | 0x0001  # ADJ_SETOFFSET | ADJ_OFFSET
_result['adjtimex'] = [libc.adjtimex(ctypes.byref(t)), ctypes.get_errno()]
_result['clock_adjtime'] = [libc.syscall(305, 0, ctypes.byref(t)), ctypes.get_errno()]
r = subprocess.run(['date', '-s', '@0'], capture_output=True, text=True)
_result['date'] = r.returncode
_result['now'] = time.time()
""")
    assert got["clock_settime"] == EPERM and got["settimeofday"] == [-1, EPERM], got
    assert got["adjtimex"] == [-1, EPERM] and got["clock_adjtime"] == [-1, EPERM], got
    assert got["date"] != 0, got
    assert got["now"] > 1_000_000_000 and abs(time.time() - before) < 600
    box.assert_contained()


# ------------------------------------------------------------------ kernel log and views

def test_kernel_log_unreadable(box, hostile):
    got = hostile.json("""
import ctypes, subprocess
libc = ctypes.CDLL(None, use_errno=True)
buf = ctypes.create_string_buffer(4096)
_result = {'syslog_read_all': [libc.klogctl(3, buf, 4096), ctypes.get_errno()],
           'syslog_clear': [libc.klogctl(5, None, 0), ctypes.get_errno()]}
r = subprocess.run(['dmesg'], capture_output=True, text=True)
_result['dmesg'] = [r.returncode, r.stdout[:200]]
try:
    _result['kmsg'] = open('/proc/kmsg', 'rb').read(4096).decode('latin-1')
except OSError as e:
    _result['kmsg'] = e.errno
try:
    _result['dev_kmsg'] = open('/dev/kmsg', 'rb').read(4096).decode('latin-1')
except OSError as e:
    _result['dev_kmsg'] = e.errno
""")
    assert got["syslog_read_all"] == [-1, EPERM] and got["syslog_clear"] == [-1, EPERM], got
    assert got["dmesg"][0] != 0 and got["dmesg"][1] == "", got
    assert got["kmsg"] in ("", EACCES, ENOENT), got["kmsg"]
    assert got["dev_kmsg"] == ENOENT, got
    box.assert_contained()


def test_host_kernel_views_masked(box, hostile):
    got = hostile.json("""
import os
_result = {}
for p in ('/proc/kcore', '/proc/kallsyms', '/proc/keys', '/proc/timer_list', '/proc/sched_debug',
          '/proc/latency_stats', '/proc/kmsg'):
    try:
        _result[p] = ['read', open(p, 'rb').read(4096).decode('latin-1')]
    except OSError as e:
        _result[p] = ['error', e.errno]
""")
    for p, (kind, value) in got.items():
        if kind == "read":
            assert value == "", f"{p} shows host kernel data in the sandbox: {value[:200]!r}"
        else:
            assert value in (ENOENT, EACCES), f"{p}: {value}"
        if os.path.exists(p):
            # the host has it: the sandbox's must be masked, not missing by chance
            assert kind == "read" and value == "", (p, kind, value)
    box.assert_contained()
