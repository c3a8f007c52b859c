"""Class 8: resource exhaustion — fork bomb, thread bomb, memory bomb (in the kernel and in a
child), disk fill, /tmp fill, inode fill, fd exhaustion, output flood (kernel and child),
infinite loop, sleeping forever, a cell that ignores the interrupt, zombie storm.

Every bomb is bounded (fork/threads: 3000 attempts, memory: 4 GiB, disk: 200 MiB, inodes:
100000 files, fds: 5000) so a missing limit fails the test instead of hurting the machine.
Each must hit its limit, be reported in words, and leave the kernel usable or cleanly
restartable, the neighbour and the daemon untouched."""
import os
import re

import pytest

pytestmark = pytest.mark.cellbox_only

MiB = 1 << 20


def assert_usable(k):
    assert k.ok("print(6 * 7)").stdout.strip() == "42"


def assert_died_and_restarts(k, cell, evalue_start):
    assert cell.final_state == "dead", cell.describe()
    assert cell.ename == "KernelDied", cell.describe()
    assert cell.error["evalue"].startswith(evalue_start), cell.error["evalue"]
    assert cell.reply_content and cell.reply_content["status"] == "error" and \
        cell.reply_content["ename"] == "KernelDied", cell.reply_content
    model = k.model()
    assert model["execution_state"] == "dead" and model["reason"].startswith(evalue_start), model
    k.restart()
    got = k.json("_result = 'STATE' in globals()")
    assert got is False, "a restarted kernel must start from a fresh interpreter"
    assert_usable(k)


# ------------------------------------------------------------------ processes

def test_fork_bomb_hits_pids_limit(box, fresh):
    k = fresh(limits={"pids": 32})
    cell = k.run("""
import os
r, w = os.pipe()
children, error = [], None
for i in range(3000):
    try:
        pid = os.fork()
    except OSError as e:
        error = e
        break
    if pid == 0:
        os.close(w)
        os.read(r, 1)  # wait until the parent lets go, then leave
        os._exit(0)
    children.append(pid)
os.close(w)
for pid in children:
    os.waitpid(pid, 0)
print('forked', len(children), type(error).__name__, getattr(error, 'errno', None))
""")
    assert cell.final_state == "idle" and cell.error is None, cell.describe()
    m = re.search(r"forked (\d+) (\w+) (\d+)", cell.stdout)
    assert m, cell.describe()
    assert int(m.group(1)) < 32 and m.group(2) == "BlockingIOError" and m.group(3) == "11", cell.stdout
    assert "[cellbox: pids limit 32 reached: " in cell.stderr, cell.describe()
    # the note arrives before idle (the cell's messages end with idle)
    assert cell.messages[-1]["msg_type"] == "status"
    assert_usable(k)
    box.assert_contained()


def test_thread_bomb_hits_pids_limit(box, fresh):
    k = fresh(limits={"pids": 32})
    cell = k.run("""
import threading
stop = threading.Event()
threads, error = [], None
for i in range(3000):
    t = threading.Thread(target=stop.wait)
    try:
        t.start()
    except RuntimeError as e:
        error = e
        break
    threads.append(t)
stop.set()
for t in threads:
    t.join()
print('threads', len(threads), repr(error))
""")
    assert cell.error is None, cell.describe()
    m = re.search(r"threads (\d+) RuntimeError\(\"can't start new thread\"\)", cell.stdout)
    assert m and int(m.group(1)) < 32, cell.stdout
    assert "[cellbox: pids limit 32 reached: " in cell.stderr, cell.describe()
    assert_usable(k)
    box.assert_contained()


def test_zombie_storm_is_reaped(box, fresh):
    """100 children left unwaited by a parent that then exits: they are re-parented to the
    sandbox's pid 1, which reaps them; none stays a zombie and the pids budget is free again."""
    k = fresh(limits={"pids": 256})
    k.ok("""
import subprocess, sys
code = '''
import os
for i in range(100):
    if os.fork() == 0:
        os._exit(0)
print('spawned', flush=True)
os._exit(0)  # without waiting: 100 zombies become orphans
'''
r = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True)
assert r.stdout.strip() == 'spawned', r
""")
    got = k.json("""
import os, time
deadline = time.monotonic() + 20
while True:
    states = {}
    for p in os.listdir('/proc'):
        if p.isdigit():
            try:
                states[int(p)] = open(f'/proc/{p}/stat').read().rsplit(')', 1)[1].split()[0]
            except OSError:
                pass
    zombies = [p for p, s in states.items() if s == 'Z']
    # Under load the last children may still be running (not yet zombies): wait for them too.
    if (not zombies and sorted(states) == [1, 2]) or time.monotonic() > deadline:
        break
    time.sleep(0.05)
_result = {'zombies': zombies, 'pids': sorted(states)}
""")
    assert got["zombies"] == [], f"zombies left in the sandbox: {got}"
    assert got["pids"] == [1, 2], got
    # the pids are free again: 100 more processes fit under the 256 limit
    k.ok("""
import os
pids = []
for i in range(100):
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    pids.append(pid)
for pid in pids:
    os.waitpid(pid, 0)
""")
    box.assert_contained()


# ------------------------------------------------------------------ memory

def test_memory_bomb_kills_kernel_with_reason_and_restart_works(box, fresh):
    k = fresh(limits={"memory": "256M"})
    k.ok("STATE = 1")
    cell = k.run("""
chunks = []
for i in range(4096):  # at most 4 GiB
    chunks.append(b'\\x01' * (1 << 20))
print('allocated', len(chunks), 'MiB')
""", timeout=120)
    assert "allocated" not in cell.stdout, f"4 GiB allocated under a 256M limit: {cell.describe()}"
    assert_died_and_restarts(k, cell, "kernel died: out of memory (limit 256 MiB)")
    box.assert_contained()


def test_the_least_memory_limit_starts_and_its_oom_spares_the_zygote(box, fresh):
    """The least memory a sandbox may ask for (64 MiB) is enough to start a kernel, and running
    out of it kills only that kernel. Less is refused: while a sandbox's pid 1 still shares the
    zygote's memory it forks the kernel, charging the kernel's copied pages to the sandbox, and an
    out-of-memory kill in that window would take the zygote with it (assert_contained checks
    the zygote is still the one the daemon started)."""
    for body in ({"limits": {"memory": "16M"}}, {"env": {"KERNEL_CELLBOX_MEMORY": "4M"}}):
        r = box.client.post("api/kernels", json=body)
        assert r.status_code == 400, (body, r.status_code, r.text)
        assert "at least 64 MiB" in r.json()["message"], r.text
    k = fresh(limits={"memory": "64M"})
    assert_usable(k)
    cell = k.run("""
chunks = []
for i in range(4096):  # at most 4 GiB
    chunks.append(b'\\x01' * (1 << 20))
print('allocated', len(chunks), 'MiB')
""", timeout=120)
    assert "allocated" not in cell.stdout, cell.describe()
    assert_died_and_restarts(k, cell, "kernel died: out of memory (limit 64 MiB)")
    box.assert_contained()


def test_memory_bomb_in_child_process_is_reported(box, fresh):
    """A child process that blows the memory limit is killed by the OOM killer; the kernel
    survives and the cell's output says which limit was hit."""
    k = fresh(limits={"memory": "256M"})
    cell = k.run("""
import subprocess, sys
r = subprocess.run([sys.executable, '-c', 'b = []\\nwhile len(b) < 4096: b.append(b"\\\\x01" * (1 << 20))'])
print('child status', r.returncode)
""", timeout=120)
    assert cell.final_state == "idle" and cell.error is None, cell.describe()
    assert "child status -9" in cell.stdout, cell.describe()
    assert_usable(k)
    assert re.search(r"\[cellbox: [^\]]*(out of memory|memory limit)[^\]]*256 MiB", cell.stderr), (
        "a process of the sandbox was OOM-killed but the cell's output does not say so: " + cell.describe())
    box.assert_contained()


# ------------------------------------------------------------------ disk

def test_disk_fill_hits_quota_with_message(box, fresh):
    k = fresh(limits={"disk": "64M"})
    cell = k.run("""
import os
written, error = 0, None
try:
    with open('/workspace/fill', 'wb') as f:
        for i in range(200):  # at most 200 MiB
            f.write(b'\\0' * (1 << 20))
            f.flush()
            written += 1
except OSError as e:
    error = e
print('written', written, 'errno', getattr(error, 'errno', None))
""")
    assert cell.error is None, cell.describe()
    m = re.search(r"written (\d+) errno (\d+)", cell.stdout)
    assert m and int(m.group(1)) <= 64 and int(m.group(2)) in (28, 27), cell.stdout  # ENOSPC / EFBIG
    # the host's disk holds at most the volume's size for this workspace
    image = os.path.join(box.daemon.data_dir, "volumes", f"{k.id}.img")
    if os.path.exists(image):
        assert os.stat(image).st_blocks * 512 <= 64 * MiB + MiB
    assert "[cellbox: disk quota 64 MiB exceeded: /workspace is full]" in cell.stderr, (
        "the workspace filled up (ENOSPC) but the cell was not told why: " + cell.describe())
    k.ok("import os; os.remove('/workspace/fill'); open('/workspace/after', 'w').write('ok')")
    box.assert_contained()


def test_tmp_fill_is_bounded(box, fresh):
    k = fresh(limits={"disk": "64M", "memory": "512M"})
    cell = k.run("""
written, error = 0, None
try:
    with open('/tmp/fill', 'wb') as f:
        for i in range(200):
            f.write(b'\\0' * (1 << 20))
            f.flush()
            written += 1
except OSError as e:
    error = e
print('written', written, 'errno', getattr(error, 'errno', None))
""")
    assert cell.error is None, cell.describe()
    m = re.search(r"written (\d+) errno (\d+)", cell.stdout)
    assert m and int(m.group(1)) <= 64 and int(m.group(2)) in (28, 27), cell.stdout
    k.ok("import os; os.remove('/tmp/fill')")
    assert_usable(k)
    box.assert_contained()


def test_inode_fill_hits_limit_with_message(box, fresh):
    k = fresh(limits={"disk": "64M"})
    cell = k.run("""
import os
os.mkdir('/workspace/inodes')
made, error = 0, None
try:
    for i in range(100000):
        open(f'/workspace/inodes/{i}', 'w').close()
        made += 1
except OSError as e:
    error = e
st = os.statvfs('/workspace')
print('made', made, 'errno', getattr(error, 'errno', None), 'free_blocks', st.f_bavail, 'free_inodes', st.f_favail)
""", timeout=120)
    assert cell.error is None, cell.describe()
    m = re.search(r"made (\d+) errno (\d+) free_blocks (\d+) free_inodes (\d+)", cell.stdout)
    assert m and int(m.group(2)) == 28 and int(m.group(4)) == 0, cell.stdout
    assert int(m.group(1)) < 100000
    assert re.search(r"\[cellbox: [^\]]*/workspace", cell.stderr), (
        "the workspace ran out of inodes (ENOSPC) but the cell was not told why: " + cell.describe())
    k.ok("import shutil; shutil.rmtree('/workspace/inodes')")
    assert_usable(k)
    box.assert_contained()


# ------------------------------------------------------------------ descriptors

def test_fd_exhaustion_gives_emfile(box, fresh):
    k = fresh(limits={"open_files": 128})
    cell = k.run("""
import socket
files, error = [], None
try:
    for i in range(5000):
        files.append(open('/dev/null') if i % 2 else socket.socket())
except OSError as e:
    error = e
n = len(files)
for f in files:
    f.close()
import resource
print('opened', n, 'errno', getattr(error, 'errno', None), 'limit', resource.getrlimit(resource.RLIMIT_NOFILE))
try:
    resource.setrlimit(resource.RLIMIT_NOFILE, (4096, 4096)); print('raised')
except (ValueError, OSError) as e:
    print('raise refused')
""")
    assert cell.error is None, cell.describe()
    m = re.search(r"opened (\d+) errno (\d+) limit \((\d+), (\d+)\)", cell.stdout)
    assert m, cell.describe()
    assert int(m.group(1)) < 128 and m.group(2) == "24" and m.group(3) == m.group(4) == "128", cell.stdout
    assert "raise refused" in cell.stdout
    assert_usable(k)
    box.assert_contained()


# ------------------------------------------------------------------ output

def test_output_flood_truncated_with_messages(box, fresh):
    k = fresh(limits={"output": "64K"})
    cell = k.run("""
for i in range(20000):
    print('x' * 99)
""")
    assert cell.final_state == "idle" and cell.error is None, cell.describe()
    published = len(cell.stdout.encode())
    assert published <= 64 * 1024, published
    assert "[cellbox: output truncated at 64 KiB; " in cell.stderr, cell.stderr
    m = re.search(r"\[cellbox: (\d+) bytes of output were dropped\]", cell.stderr)
    assert m, cell.stderr
    assert published + int(m.group(1)) == 20000 * 100, (published, m.group(1))
    assert k.ok("print('after the flood')").stdout == "after the flood\n"
    box.assert_contained()


def test_output_flood_from_child_process_truncated(box, fresh):
    k = fresh(limits={"output": "64K"})
    cell = k.run("!head -c 3000000 /dev/zero | tr '\\\\0' y")
    assert cell.final_state == "idle", cell.describe()
    assert len(cell.stdout.encode()) <= 64 * 1024
    assert "[cellbox: output truncated at 64 KiB; " in cell.stderr, cell.stderr
    m = re.search(r"\[cellbox: (\d+) bytes of output were dropped\]", cell.stderr)
    assert m and len(cell.stdout.encode()) + int(m.group(1)) == 3000000, (len(cell.stdout), cell.stderr)
    assert_usable(k)
    box.assert_contained()


# ------------------------------------------------------------------ time

def test_infinite_loop_interrupted_by_timeout(box, fresh):
    k = fresh(limits={"timeout": 3})
    k.ok("STATE = 'kept'")
    cell = k.run("while True:\n    pass\n", timeout=60)
    assert cell.final_state == "idle", cell.describe()
    assert "[cellbox: timeout after 3 s: the cell was interrupted]" in cell.stderr, cell.describe()
    assert cell.ename == "KeyboardInterrupt" and cell.reply_content["status"] == "error", cell.describe()
    assert k.json("_result = STATE") == "kept"
    box.assert_contained()


def test_sleep_forever_interrupted_by_timeout(box, fresh):
    k = fresh(limits={"timeout": 3})
    cell = k.run("import time\ntime.sleep(10 ** 6)\n", timeout=60)
    assert "[cellbox: timeout after 3 s: the cell was interrupted]" in cell.stderr, cell.describe()
    assert cell.ename == "KeyboardInterrupt", cell.describe()
    cell = k.run("!sleep 100000", timeout=60)
    assert "[cellbox: timeout after 3 s: the cell was interrupted]" in cell.stderr, cell.describe()
    assert cell.final_state == "idle"
    assert_usable(k)
    got = k.json("import os\n_result = sorted(int(p) for p in os.listdir('/proc') if p.isdigit())")
    assert got == [1, 2], f"the interrupted child is still there: {got}"
    box.assert_contained()


def test_cell_ignoring_interrupt_is_killed_and_restartable(box, fresh):
    k = fresh(limits={"timeout": 3})
    k.ok("STATE = 1")
    cell = k.run("""
import signal, time
signal.signal(signal.SIGINT, signal.SIG_IGN)
while True:
    time.sleep(0.05)
""", timeout=60)
    assert "[cellbox: timeout after 3 s: the cell was interrupted]" in cell.stderr, cell.describe()
    assert_died_and_restarts(k, cell, "kernel died: timeout after 3 s (the cell did not stop when interrupted)")
    box.assert_contained()


def test_limits_beyond_daemon_maximum_refused(box):
    """A sandbox cannot ask for more than the daemon allows (defaults are the maxima here)."""
    for body, name in (({"limits": {"memory": "64G"}}, "limits.memory"),
                       ({"limits": {"pids": 100000}}, "limits.pids"),
                       ({"env": {"KERNEL_CELLBOX_MEMORY": "64G"}}, "KERNEL_CELLBOX_MEMORY"),
                       ({"limits": {"disk": "1T"}}, "limits.disk")):
        r = box.client.post("api/kernels", json=body)
        assert r.status_code == 400, (body, r.status_code, r.text)
        assert name in r.json()["message"], r.text
    box.assert_contained()
