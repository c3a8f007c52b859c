"""Class 3: seeing or signalling other processes — host pids (the daemon's), other sandboxes,
the sandbox's own pid 1 (the supervisor must survive), ptrace and process_vm_readv, and
processes that try to outlive their sandbox."""
import os

import pytest

from seclib import all_gone, processes_of, wait_until

pytestmark = pytest.mark.cellbox_only

ESRCH, EPERM = 3, 1


def test_kill_daemon_and_neighbour_by_host_pid(box, hostile):
    dpid = box.daemon.pid
    nb_pid = box.neighbour.kernel_host_pid()
    nb_sup = box.neighbour.supervisor_host_pid()
    assert nb_pid and nb_sup
    got = hostile.json(f"""
import os, signal
_result = {{}}
for name, pid in (('daemon', {dpid}), ('neighbour', {nb_pid}), ('neighbour_pid1', {nb_sup}),
                  ('daemon_group', -{dpid})):
    for sig in (signal.SIGKILL, signal.SIGTERM, signal.SIGSTOP):
        try:
            os.kill(pid, sig); _result[f'{{name}}:{{sig.name}}'] = 'sent'
        except OSError as e:
            _result[f'{{name}}:{{sig.name}}'] = e.errno
""")
    for key, outcome in got.items():
        assert outcome in (ESRCH, EPERM), f"kill {key}: {outcome}"
    assert box.daemon.alive()
    assert os.path.exists(f"/proc/{nb_pid}")
    box.assert_contained()


def test_kill_everything_visible(box, fresh):
    """kill(-1) reaches only the sandbox's own processes; the kernel's own group and session
    likewise. The kernel process dies (it killed itself) and the neighbour does not notice."""
    k = fresh()
    got = k.json("""
import os, signal
_result = {}
try:
    os.kill(-1, signal.SIGKILL); _result['all'] = 'sent'
except OSError as e:
    _result['all'] = e.errno
""")
    assert got["all"] in ("sent", ESRCH)
    cell = k.run("import os, signal; os.killpg(0, signal.SIGKILL)")
    assert cell.final_state == "dead", cell.describe()
    assert cell.ename == "KernelDied" and "killed by signal 9" in cell.error["evalue"], cell.describe()
    box.assert_contained()


def test_supervisor_survives_signals_from_inside(box, fresh):
    """pid 1 of the sandbox ignores signals its children send (it is the namespace's init);
    the kernel keeps working."""
    k = fresh()
    got = k.json("""
import os, signal
_result = {}
for sig in (signal.SIGKILL, signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGSTOP, signal.SIGSEGV):
    try:
        os.kill(1, sig); _result[sig.name] = 'sent'
    except OSError as e:
        _result[sig.name] = e.errno
_result['pid1'] = open('/proc/1/stat').read().split()[2]
""")
    assert got["pid1"] in ("S", "R"), got
    assert k.ok("print(40 + 2)").stdout.strip() == "42"
    assert k.model()["execution_state"] == "idle"
    box.assert_contained()


def test_ptrace_and_process_vm_readv_refused(box, hostile):
    got = hostile.json("""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
PTRACE_TRACEME, PTRACE_ATTACH, PTRACE_SEIZE = 0, 16, 0x4206
_result = {}
for name, args in (('attach1', (PTRACE_ATTACH, 1, 0, 0)), ('seize1', (PTRACE_SEIZE, 1, 0, 0)),
                   ('traceme', (PTRACE_TRACEME, 0, 0, 0))):
    rc = libc.ptrace(*[ctypes.c_long(a) for a in args])
    _result[name] = [rc, ctypes.get_errno()]
buf = ctypes.create_string_buffer(64)
class iovec(ctypes.Structure):
    _fields_ = [('base', ctypes.c_void_p), ('len', ctypes.c_size_t)]
local = iovec(ctypes.cast(buf, ctypes.c_void_p), 64)
remote = iovec(0x400000, 64)
rc = libc.syscall(310, 1, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)  # process_vm_readv
_result['process_vm_readv'] = [rc, ctypes.get_errno()]
rc = libc.syscall(311, 1, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)  # process_vm_writev
_result['process_vm_writev'] = [rc, ctypes.get_errno()]
for p in ('/proc/1/mem', '/proc/1/environ', '/proc/1/maps', '/proc/1/fd'):
    try:
        os.listdir(p) if p.endswith('fd') else open(p, 'rb').read(16)
        _result[p] = 'read'
    except OSError as e:
        _result[p] = e.errno
""")
    for name in ("attach1", "seize1", "traceme", "process_vm_readv", "process_vm_writev"):
        assert got[name] == [-1, EPERM], f"{name}: {got[name]}"
    for p in ("/proc/1/mem", "/proc/1/environ", "/proc/1/maps", "/proc/1/fd"):
        assert got[p] == 13, f"{p}: {got[p]}"
    box.assert_contained()


def test_pidfd_getfd_on_supervisor_refused(box, hostile):
    """pidfd_getfd (steal a descriptor of another process) needs ptrace rights over it."""
    got = hostile.json("""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
pidfd = libc.syscall(434, 1, 0)  # pidfd_open(1)
_result = {'pidfd_open': pidfd}
rc = libc.syscall(438, pidfd, 0, 0) if pidfd >= 0 else -1  # pidfd_getfd(pidfd, 0)
_result['getfd'] = [rc, ctypes.get_errno()]
if pidfd >= 0: os.close(pidfd)
""")
    assert got["getfd"][0] == -1 and got["getfd"][1] in (EPERM, 9), got
    box.assert_contained()


def test_escaped_session_does_not_outlive_delete(box, fresh):
    """A child that leaves the kernel's process group and session (setsid, double fork) and
    ignores SIGTERM/SIGHUP must still die when the kernel is deleted: no process of that
    sandbox's pid namespace survives on the host."""
    k = fresh()
    k.ok("""
import os, signal, time
pid = os.fork()
if pid == 0:
    os.setsid()
    if os.fork() == 0:
        signal.signal(signal.SIGTERM, signal.SIG_IGN); signal.signal(signal.SIGHUP, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        open('/workspace/escaper.pid', 'w').write(str(os.getpid()))
        while True:
            time.sleep(1)
    os._exit(0)
os.waitpid(pid, 0)
""")
    wait_until(lambda: os.path.exists(os.path.join(k.workspace, "escaper.pid")), timeout=10)
    sup = k.supervisor_host_pid()
    ns = os.readlink(f"/proc/{sup}/ns/pid")
    processes = processes_of(ns)
    assert len(processes) >= 3
    r = k.delete()
    assert r.status_code == 204
    wait_until(lambda: all_gone(processes), timeout=20,
               message="every process of the deleted sandbox gone")
    box.assert_contained()


def test_escaped_session_does_not_outlive_restart(box, fresh):
    k = fresh()
    k.ok("""
import os, signal, time
if os.fork() == 0:
    os.setsid()
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    while True:
        time.sleep(1)
""")
    sup = k.supervisor_host_pid()
    ns = os.readlink(f"/proc/{sup}/ns/pid")
    # By host pid and start time: the kernel hands a freed namespace's inode number to the next
    # one, so after the restart the new sandbox may carry the old namespace's name.
    old = processes_of(ns)
    assert len(old) >= 3, old  # pid 1, the kernel, the escaped session
    k.restart()
    wait_until(lambda: all_gone(old),
               timeout=20, message="the old sandbox's processes gone after restart")
    got = k.json("import os\n_result = sorted(int(p) for p in os.listdir('/proc') if p.isdigit())")
    assert got == [1, 2], got
    box.assert_contained()


def test_sandboxes_have_distinct_pid_namespaces_and_uids(box, fresh):
    a, b = fresh(), fresh()
    assert a.proof["pidns"] != b.proof["pidns"] != box.neighbour.proof["pidns"]
    assert len({a.uid, b.uid, box.neighbour.uid}) == 3
    assert a.proof["pid"] == b.proof["pid"] == 2
    got = a.json(f"""
import os, signal
_result = {{}}
try:
    os.kill({b.kernel_host_pid()}, signal.SIGKILL); _result['kill'] = 'sent'
except OSError as e:
    _result['kill'] = e.errno
""")
    assert got["kill"] == ESRCH
    assert b.ok("print('b alive')").stdout.strip() == "b alive"
    box.assert_contained()
